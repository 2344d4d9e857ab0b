//! A command's arguments, as the wire parsed them: [`Args`] borrows a connection's read
//! buffer (no copy on the hot path), [`OwnedArgs`] owns its bytes (a queued MULTI command, a
//! pipelined command running concurrently). Argument 0 is the command's name.

use bytes::Bytes;

/// The arguments of one parsed request.
#[derive(Clone, Copy, Debug)]
pub struct Args<'a> {
    base: &'a [u8],
    ranges: &'a [(usize, usize)],
}

impl<'a> Args<'a> {
    /// Arguments `base[s..e]` for each range (ranges must lie within `base`).
    pub fn from_parts(base: &'a [u8], ranges: &'a [(usize, usize)]) -> Self {
        Args { base, ranges }
    }

    /// Number of arguments (the command name included).
    #[inline]
    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    /// Whether there are none (an empty request).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Argument `i`; panics if out of range.
    #[inline]
    pub fn get(&self, i: usize) -> &'a [u8] {
        let (s, e) = self.ranges[i];
        &self.base[s..e]
    }

    /// Each argument's range in the input.
    pub fn ranges(&self) -> &'a [(usize, usize)] {
        self.ranges
    }

    /// The arguments from `n` on, as a request of their own (COMMAND GETKEYS's inner
    /// command); empty when `n` is past the end.
    pub fn skip(&self, n: usize) -> Args<'a> {
        Args {
            base: self.base,
            ranges: &self.ranges[n.min(self.ranges.len())..],
        }
    }

    /// The first `n` arguments (all of them when there are fewer).
    pub fn take(&self, n: usize) -> Args<'a> {
        Args {
            base: self.base,
            ranges: &self.ranges[..n.min(self.ranges.len())],
        }
    }

    /// Arguments from `i` on.
    pub fn iter_from(&self, i: usize) -> impl ExactSizeIterator<Item = &'a [u8]> + Clone + 'a {
        let base = self.base;
        self.ranges[i.min(self.ranges.len())..]
            .iter()
            .map(move |&(s, e)| &base[s..e])
    }
}

/// The arguments of one request, owning their bytes: cluster mode runs a connection's key
/// commands concurrently, so their arguments must outlive the read buffer's next reuse.
#[derive(Debug)]
pub struct OwnedArgs {
    base: Bytes,
    ranges: Box<[(usize, usize)]>,
}

impl OwnedArgs {
    /// Arguments `base[s..e]` for each range (ranges must lie within `base`).
    pub fn from_parts(base: Bytes, ranges: Box<[(usize, usize)]>) -> Self {
        Self { base, ranges }
    }

    /// Its bytes and its arguments' ranges in them.
    pub fn parts(&self) -> (&Bytes, &[(usize, usize)]) {
        (&self.base, &self.ranges)
    }

    /// A copy of `args` (MULTI queues a request whose bytes the read buffer will reuse).
    pub fn copy_of(args: Args<'_>) -> Self {
        Self::from_slices(args.iter_from(0))
    }

    /// Arguments holding a copy of each of `parts`, in order (tests and tools build requests
    /// this way).
    pub fn from_slices<'p>(parts: impl ExactSizeIterator<Item = &'p [u8]> + Clone) -> Self {
        let mut base = Vec::with_capacity(parts.clone().map(<[u8]>::len).sum());
        let mut ranges = Vec::with_capacity(parts.len());
        for a in parts {
            ranges.push((base.len(), base.len() + a.len()));
            base.extend_from_slice(a);
        }
        Self {
            base: Bytes::from(base),
            ranges: ranges.into_boxed_slice(),
        }
    }

    /// The arguments, borrowed.
    #[inline]
    pub fn get(&self) -> Args<'_> {
        Args {
            base: &self.base,
            ranges: &self.ranges,
        }
    }
}
