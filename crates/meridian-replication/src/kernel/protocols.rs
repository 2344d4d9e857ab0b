//! The protocols' states as values the kernel holds without naming their types: a small
//! registry keyed by type, filled once when a node is built (by [`crate::node`]) and read by
//! [`super::Node::protocol`].
//!
//! Guarantees: each type is registered at most once (a second registration panics, so two
//! protocols can never share a state by accident); a lookup of a registered type always
//! returns the one value registered; the registry never changes after the node is built.

use std::any::{Any, TypeId};

/// One registered state, with its type's name for `Debug`.
struct Entry {
    id: TypeId,
    name: &'static str,
    state: Box<dyn Any + Send + Sync>,
}

/// The protocols' states of one node (see the module docs).
#[derive(Default)]
pub struct Protocols {
    entries: Vec<Entry>,
}

impl Protocols {
    /// An empty registry.
    pub fn new() -> Protocols {
        Protocols::default()
    }

    /// Registers `state` as the one value of its type.
    ///
    /// # Panics
    /// If a value of that type is registered already.
    pub fn register<T: Any + Send + Sync>(&mut self, state: T) {
        let id = TypeId::of::<T>();
        let name = std::any::type_name::<T>();
        assert!(
            self.entries.iter().all(|e| e.id != id),
            "{name} is registered twice"
        );
        self.entries.push(Entry {
            id,
            name,
            state: Box::new(state),
        });
    }

    /// The registered value of type `T`, if there is one.
    pub fn get<T: Any>(&self) -> Option<&T> {
        let id = TypeId::of::<T>();
        self.entries
            .iter()
            .find(|e| e.id == id)
            .and_then(|e| e.state.downcast_ref::<T>())
    }
}

impl std::fmt::Debug for Protocols {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.entries.iter().map(|e| e.name))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    struct A(u32);
    #[derive(Debug, PartialEq)]
    struct B(&'static str);

    #[test]
    fn each_type_finds_the_value_registered_for_it() {
        let mut p = Protocols::new();
        p.register(A(7));
        p.register(B("b"));
        assert_eq!(p.get::<A>(), Some(&A(7)));
        assert_eq!(p.get::<B>(), Some(&B("b")));
        assert_eq!(p.get::<u64>(), None);
    }

    #[test]
    #[should_panic(expected = "registered twice")]
    fn a_type_registers_once() {
        let mut p = Protocols::new();
        p.register(A(1));
        p.register(A(2));
    }
}
