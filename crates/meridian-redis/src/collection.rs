//! Collections held in memory: the typed objects (a list, a set, a sorted set) a view may
//! keep instead of their stored bytes, and the one way every collection command reaches its
//! key's collection whatever the view keeps.
//!
//! A view that keeps objects (the standalone keyspace) hands a command the live object itself
//! ([`View::object_mut`]), so a push, an add or a pop changes it in place in O(1) or
//! O(log n), never re-encoding the whole collection. Any other view (a cluster's one-key
//! view, a MULTI overlay, the tests' maps) holds bytes: the command decodes them into the
//! same type, changes it, and stores its encoding. [`read`], [`update`] and [`store`] take
//! whichever path the view offers, so each command is written once, over the typed object.
//!
//! **What a command must keep**: an [`update`]'s closure checks everything that can fail
//! before it changes the collection, and never fails after a change (on the in-memory path
//! there is no copy to fall back to). A collection left empty is deleted, as Redis deletes
//! an empty list, set or sorted set. On the bytes path an encoding longer than
//! [`View::max_value_len`] is refused and nothing changes; an in-memory object is bounded by
//! the server's memory limit instead.

use crate::error::{RedisError, Result};
use crate::view::{EntryRef, Kind, View};
use bytes::Bytes;
use std::any::Any;
use std::fmt;

/// A collection in memory, whatever its type: what a view keeps and materializes.
pub trait Collection: Any + Send + Sync + fmt::Debug {
    /// The type it is stored as.
    fn kind(&self) -> Kind;
    /// Its stored form: the data of an envelope of [`Collection::kind`], as the type's
    /// decoder reads it (DUMP, RENAME, a MULTI overlay and SORT read it so).
    fn encode(&self) -> Vec<u8>;
    /// Whether it has no element (an empty collection is never kept: its key is deleted).
    fn is_empty(&self) -> bool;
    /// Its element count.
    fn len(&self) -> usize;
    /// The bytes of memory it holds, approximately, in O(1) (INFO's `used_memory`,
    /// MEMORY USAGE, the eviction limit).
    fn memory(&self) -> usize;
    /// Takes the shape a view keeps (called once, by a view that keeps it): a decoded value
    /// may be laid out for one decode-change-encode pass (a set's sorted slices), which a
    /// kept one leaves for what makes every later change cheap. Nothing by default.
    fn settle(&mut self) {}
    /// Itself, for a downcast to its type.
    fn as_any(&self) -> &dyn Any;
    /// Itself, for a downcast to its type.
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

/// A collection type: decoded from the bytes [`Collection::encode`] gives.
pub trait Typed: Collection + Default + Sized {
    /// The type's name in Redis's "too large" error (`list`, `set`, `zset`).
    const NAME: &'static str;
    /// The kind of every value of this type.
    const KIND: Kind;
    /// Decodes stored data: `Corrupt` (never a panic) for bytes that do not decode.
    fn decode(data: &Bytes) -> Result<Self>;
    /// The element count of stored data, read without decoding it (LLEN, SCARD, ZCARD).
    fn stored_len(data: &Bytes) -> Result<usize>;
}

/// The live collection at `key` and its expiry if the view keeps it as an object (`None`
/// otherwise: the bytes are `View::load`'s): `WRONGTYPE` if it is of another type.
pub fn held<'v, T: Typed, V: View + ?Sized>(
    v: &'v mut V,
    key: &[u8],
) -> Result<Option<(&'v mut T, Option<u64>)>> {
    match v.object_mut(key)? {
        None => Ok(None),
        Some((obj, expiry)) => match obj.as_any_mut().downcast_mut::<T>() {
            Some(t) => Ok(Some((t, expiry))),
            None => Err(RedisError::WrongType),
        },
    }
}

/// The collection at `key` decoded from the view's bytes, with its expiry: `WRONGTYPE` for a
/// value of another type, `None` when the key is absent.
pub fn load<T: Typed, V: View + ?Sized>(v: &mut V, key: &[u8]) -> Result<Option<(T, Option<u64>)>> {
    match v.load(key)? {
        None => Ok(None),
        Some(e) if e.kind != T::KIND => Err(RedisError::WrongType),
        Some(e) => Ok(Some((T::decode(&e.data)?, e.expiry))),
    }
}

/// Runs `f` over the collection at `key` without counting a read or recording a write (a
/// write command's look before it decides to change anything): `None` when absent.
pub fn peek<T: Typed, V: View + ?Sized, R>(
    v: &mut V,
    key: &[u8],
    f: impl FnOnce(&T) -> R,
) -> Result<Option<R>> {
    if let Some((t, _)) = held::<T, V>(v, key)? {
        return Ok(Some(f(t)));
    }
    Ok(load::<T, V>(v, key)?.map(|(t, _)| f(&t)))
}

/// The element count of the collection at `key` (`None` when absent) in O(1) whatever the
/// view keeps: stored bytes are not decoded. Counts a hit or a miss if `count_read`.
pub fn len<T: Typed, V: View + ?Sized>(
    v: &mut V,
    key: &[u8],
    count_read: bool,
) -> Result<Option<usize>> {
    let n = match held::<T, V>(v, key) {
        Ok(Some((t, _))) => Ok(Some(t.len())),
        Err(e) => Err(e),
        Ok(None) => match v.load(key)? {
            None => Ok(None),
            Some(e) if e.kind != T::KIND => Err(RedisError::WrongType),
            Some(e) => T::stored_len(&e.data).map(Some),
        },
    };
    if count_read {
        v.count_read(key, !matches!(n, Ok(None)));
    }
    n
}

/// Runs the read `f` over the collection at `key` (`None` when absent), counting a hit or a
/// miss for INFO. `WRONGTYPE` for a key of another type.
pub fn read<T: Typed, V: View + ?Sized, R>(
    v: &mut V,
    key: &[u8],
    f: impl FnOnce(&T) -> Result<R>,
) -> Result<Option<R>> {
    match held::<T, V>(v, key) {
        Ok(Some((t, _))) => {
            let r = f(t);
            v.count_read(key, true);
            return r.map(Some);
        }
        Err(e) => {
            v.count_read(key, true);
            return Err(e);
        }
        Ok(None) => {}
    }
    let loaded = load::<T, V>(v, key);
    v.count_read(
        key,
        matches!(loaded, Ok(Some(_)) | Err(RedisError::WrongType)),
    );
    match loaded? {
        None => Ok(None),
        Some((t, _)) => f(&t).map(Some),
    }
}

/// Runs the write `f` over the collection at `key` and keeps what it leaves (deleting the key
/// if it leaves it empty). When the key is absent, `f` runs over an empty collection if
/// `create`, else `f` does not run and the answer is `None`. The key keeps its expiry.
/// `WRONGTYPE` for a key of another type; `f`'s error leaves the key as it was (see the
/// module docs for what `f` must keep).
pub fn update<T: Typed, V: View + ?Sized, R>(
    v: &mut V,
    key: &[u8],
    create: bool,
    f: impl FnOnce(&mut T) -> Result<R>,
) -> Result<Option<R>> {
    modify(v, key, create, |t| f(t).map(|r| (r, true)))
}

/// [`update`] for a write that may change nothing: `f` answers whether it changed the
/// collection, and only then is the write recorded (the held object's
/// [`View::object_changed`], or the encoding stored) — as Redis signals a key only when a
/// command changed it, so WATCH and blocked clients see no write, and a bytes view
/// re-encodes nothing, when none happened. `f`'s error type only needs to hold the view's.
pub fn modify<T: Typed, V: View + ?Sized, R, E: From<RedisError>>(
    v: &mut V,
    key: &[u8],
    create: bool,
    f: impl FnOnce(&mut T) -> std::result::Result<(R, bool), E>,
) -> std::result::Result<Option<R>, E> {
    if let Some((t, _)) = held::<T, V>(v, key)? {
        let (r, changed) = f(t)?;
        if changed {
            v.object_changed(key)?;
        }
        return Ok(Some(r));
    }
    let (mut t, expiry) = match load::<T, V>(v, key)? {
        Some(loaded) => loaded,
        None if create => (T::default(), None),
        None => return Ok(None),
    };
    let (r, changed) = f(&mut t)?;
    if changed {
        store(v, key, t, expiry)?;
    }
    Ok(Some(r))
}

/// Stores `t` at `key` with `expiry` (replacing whatever the key held), or deletes the key
/// when `t` is empty. A view that keeps objects keeps it; any other stores its encoding,
/// refused (nothing stored) when longer than the view's longest value.
pub fn store<T: Typed, V: View + ?Sized>(
    v: &mut V,
    key: &[u8],
    t: T,
    expiry: Option<u64>,
) -> Result<()> {
    if t.is_empty() {
        return v.store(key, None);
    }
    let Some(returned) = v.store_object(key, Box::new(t), expiry)? else {
        return Ok(());
    };
    let data = returned.encode();
    if data.len() > v.max_value_len() {
        return Err(RedisError::CollectionTooLarge(T::NAME));
    }
    v.store(
        key,
        Some(EntryRef {
            data: &data,
            expiry,
            kind: T::KIND,
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_view::TestView;
    use meridian_core::Timestamp;

    /// A minimal collection: bytes in order, encoded as they are.
    #[derive(Debug, Default, PartialEq)]
    struct Bag(Vec<u8>);

    impl Collection for Bag {
        fn kind(&self) -> Kind {
            Kind::List
        }
        fn encode(&self) -> Vec<u8> {
            self.0.clone()
        }
        fn is_empty(&self) -> bool {
            self.0.is_empty()
        }
        fn len(&self) -> usize {
            self.0.len()
        }
        fn memory(&self) -> usize {
            self.0.capacity()
        }
        fn as_any(&self) -> &dyn Any {
            self
        }
        fn as_any_mut(&mut self) -> &mut dyn Any {
            self
        }
    }

    impl Typed for Bag {
        const NAME: &'static str = "list";
        const KIND: Kind = Kind::List;
        fn decode(data: &Bytes) -> Result<Self> {
            if data.first() == Some(&0xff) {
                return Err(RedisError::Corrupt("bad bag"));
            }
            Ok(Bag(data.to_vec()))
        }
        fn stored_len(data: &Bytes) -> Result<usize> {
            Ok(data.len())
        }
    }

    fn push(b: &mut Bag, x: u8) -> Result<usize> {
        b.0.push(x);
        Ok(b.0.len())
    }

    /// Both paths — bytes and held objects — give the same answers and the same stored
    /// collections.
    #[test]
    fn bytes_and_held_objects_behave_alike() {
        for held in [false, true] {
            let mut v = TestView::new();
            v.hold_objects = held;
            assert_eq!(
                update::<Bag, _, _>(&mut v, b"k", false, |b| push(b, 1)).unwrap(),
                None
            );
            assert_eq!(
                update::<Bag, _, _>(&mut v, b"k", true, |b| push(b, 1)).unwrap(),
                Some(1)
            );
            assert_eq!(
                update::<Bag, _, _>(&mut v, b"k", true, |b| push(b, 2)).unwrap(),
                Some(2)
            );
            let seen = read::<Bag, _, _>(&mut v, b"k", |b| Ok(b.0.clone())).unwrap();
            assert_eq!(seen, Some(vec![1, 2]), "held: {held}");
            assert_eq!(
                v.load(b"k").unwrap().unwrap().data,
                Bytes::from_static(&[1, 2])
            );
            // Emptied: the key is gone.
            update::<Bag, _, _>(&mut v, b"k", false, |b| {
                b.0.clear();
                Ok(())
            })
            .unwrap();
            assert!(v.load(b"k").unwrap().is_none(), "held: {held}");
            assert_eq!(v.held_count(), 0);
        }
    }

    #[test]
    fn another_type_is_wrongtype_and_counts_a_hit() {
        for held in [false, true] {
            let mut v = TestView::new();
            v.hold_objects = held;
            v.store(b"s", Some(EntryRef::string(b"x", None))).unwrap();
            let err = update::<Bag, _, _>(&mut v, b"s", true, |b| push(b, 1)).unwrap_err();
            assert!(matches!(err, RedisError::WrongType));
            let err = read::<Bag, _, _>(&mut v, b"s", |_| Ok(())).unwrap_err();
            assert!(matches!(err, RedisError::WrongType));
            assert_eq!((v.hits, v.misses), (1, 0));
            assert_eq!(
                read::<Bag, _, _>(&mut v, b"none", |_| Ok(())).unwrap(),
                None
            );
            assert_eq!((v.hits, v.misses), (1, 1));
        }
    }

    #[test]
    fn a_write_that_changes_nothing_records_nothing() {
        for held in [false, true] {
            let mut v = TestView::new();
            v.hold_objects = held;
            update::<Bag, _, _>(&mut v, b"k", true, |b| push(b, 1)).unwrap();
            let stores = v.stores;
            let r = modify::<Bag, _, _, RedisError>(&mut v, b"k", true, |b| Ok((b.0.len(), false)));
            assert_eq!(r.unwrap(), Some(1));
            assert_eq!(v.stores, stores, "held: {held}");
            // Nothing created for an absent key that stays empty.
            let r = modify::<Bag, _, _, RedisError>(&mut v, b"new", true, |_| Ok(((), false)));
            assert_eq!(r.unwrap(), Some(()));
            assert!(v.load(b"new").unwrap().is_none());
        }
    }

    #[test]
    fn a_failed_update_changes_nothing_and_damage_is_an_error() {
        let mut v = TestView::new();
        update::<Bag, _, _>(&mut v, b"k", true, |b| push(b, 7)).unwrap();
        let err = update::<Bag, _, _>(&mut v, b"k", true, |_| -> Result<()> {
            Err(RedisError::Syntax)
        });
        assert!(err.is_err());
        assert_eq!(
            v.load(b"k").unwrap().unwrap().data,
            Bytes::from_static(&[7])
        );
        v.store(
            b"bad",
            Some(EntryRef {
                data: &[0xff],
                expiry: None,
                kind: Kind::List,
            }),
        )
        .unwrap();
        let err = read::<Bag, _, _>(&mut v, b"bad", |_| Ok(())).unwrap_err();
        assert!(matches!(err, RedisError::Corrupt(_)));
    }

    #[test]
    fn the_bytes_path_refuses_what_exceeds_the_longest_value() {
        let mut v = TestView::new();
        v.max = 2;
        update::<Bag, _, _>(&mut v, b"k", true, |b| push(b, 1)).unwrap();
        update::<Bag, _, _>(&mut v, b"k", true, |b| push(b, 2)).unwrap();
        let err = update::<Bag, _, _>(&mut v, b"k", true, |b| push(b, 3)).unwrap_err();
        assert!(matches!(err, RedisError::CollectionTooLarge("list")));
        assert_eq!(
            v.load(b"k").unwrap().unwrap().data,
            Bytes::from_static(&[1, 2])
        );
    }

    #[test]
    fn an_update_keeps_the_expiry_and_a_store_replaces_it() {
        for held in [false, true] {
            let mut v = TestView::new();
            v.hold_objects = held;
            store(&mut v, b"k", Bag(vec![1]), Some(99_000_000)).unwrap();
            update::<Bag, _, _>(&mut v, b"k", true, |b| push(b, 2)).unwrap();
            assert_eq!(v.load(b"k").unwrap().unwrap().expiry, Some(99_000_000));
            store(&mut v, b"k", Bag(vec![3]), None).unwrap();
            assert_eq!(v.load(b"k").unwrap().unwrap().expiry, None);
            // Past its expiry the key reads as absent, and a write starts a new collection.
            let soon = v.now.0 + 1;
            store(&mut v, b"k", Bag(vec![3]), Some(soon)).unwrap();
            v.now = Timestamp(v.now.0 + 2);
            assert_eq!(read::<Bag, _, _>(&mut v, b"k", |_| Ok(())).unwrap(), None);
            let n = update::<Bag, _, _>(&mut v, b"k", true, |b| push(b, 4)).unwrap();
            assert_eq!(n, Some(1), "held: {held}");
        }
    }
}
