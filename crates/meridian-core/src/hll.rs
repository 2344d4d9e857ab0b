//! Redis's HyperLogLog representation, byte for byte (Redis 7.0's `hyperloglog.c`), shared by the
//! Redis layer (PFADD, PFCOUNT, PFMERGE) and the eventual buckets' register CRDT: the
//! header, the dense and sparse register encodings, the element hash, and the estimator.
//!
//! ```text
//! header (16 bytes): "HYLL" | encoding (0 dense, 1 sparse) | 3 unused | cached card (u64 LE,
//!                    bit 63 set = the cache is stale)
//! dense  (12288 bytes): 16384 registers of 6 bits, packed from each byte's low bit up
//! sparse (any length): opcodes covering the 16384 registers in order
//!     00xxxxxx           ZERO:  x+1 registers (1..=64) at 0
//!     01xxxxxx yyyyyyyy  XZERO: (x<<8|y)+1 registers (1..=16384) at 0
//!     1vvvvvxx           VAL:   x+1 registers (1..=4) at v+1 (1..=32)
//! ```
//!
//! Everything that reads a stored value treats it as hostile: a header of the wrong length,
//! opcodes that stop short of or run past 16384 registers, a dense body of the wrong size are
//! errors, never a panic, and no allocation depends on a length the value claims. Where
//! Redis reads one byte past a value (an XZERO opcode cut at the end reads the string's NUL
//! terminator), the missing byte reads as 0, so the same bytes mean the same registers here;
//! an [`Hll`] being changed keeps that byte as Redis does (see there).

/// Bits of the hash that pick a register.
const P: u32 = 14;
/// The bits left to count the run of zeros in.
const Q: usize = 64 - P as usize;
/// Registers in an HLL.
pub const REGISTERS: usize = 1 << P;
/// The header's length.
pub const HDR: usize = 16;
/// The dense body's length: 16384 registers of 6 bits.
pub const DENSE_BODY: usize = REGISTERS * 6 / 8;
/// A dense HLL's whole length.
pub const DENSE_SIZE: usize = HDR + DENSE_BODY;
/// Redis's default `hll-sparse-max-bytes`: a sparse HLL that would grow past it turns dense.
pub const SPARSE_MAX_BYTES: usize = 3000;
/// The largest value a sparse VAL opcode holds.
const SPARSE_VAL_MAX: u8 = 32;
/// The longest run a VAL opcode covers.
const SPARSE_VAL_MAX_LEN: usize = 4;
/// The longest run a ZERO opcode covers.
const SPARSE_ZERO_MAX_LEN: usize = 64;
/// Offset of the byte holding the cache's stale bit.
const CARD_MSB: usize = 15;
/// The seed Redis hashes elements with.
const SEED: u64 = 0xadc8_3b19;
/// `0.5 / ln 2`, the estimator's constant for an infinite register count.
const ALPHA_INF: f64 = 0.721_347_520_444_481_7;

/// A register histogram: how many registers hold each value (a dense value may hold any
/// 6-bit value, so 64 slots).
pub type Histogram = [u64; 64];

/// An HLL's encoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    /// 16384 packed 6-bit registers.
    Dense,
    /// Run-length opcodes.
    Sparse,
}

/// Why a stored value cannot be used as an HLL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bad {
    /// Not an HLL at all (header, magic, encoding, dense length): Redis's
    /// `-WRONGTYPE Key is not a valid HyperLogLog string value.`
    NotHll,
    /// An HLL whose sparse opcodes do not cover exactly 16384 registers: Redis's
    /// `-INVALIDOBJ Corrupted HLL object detected`.
    Corrupt,
}

/// Redis's `isHLLObjectOrReply`: the header names an HLL (magic, known encoding) and a dense
/// value has exactly the dense length. Sparse opcodes are not checked here (Redis checks
/// them as it walks them).
pub fn encoding(v: &[u8]) -> Result<Encoding, Bad> {
    if v.len() < HDR || &v[..4] != b"HYLL" {
        return Err(Bad::NotHll);
    }
    match v[4] {
        0 if v.len() == DENSE_SIZE => Ok(Encoding::Dense),
        1 => Ok(Encoding::Sparse),
        _ => Err(Bad::NotHll),
    }
}

/// The cached cardinality, if the cache is valid (its bit 63 clear). `v` has a header.
pub fn cached_card(v: &[u8]) -> Option<u64> {
    let card = u64::from_le_bytes(v[8..HDR].try_into().ok()?);
    (card >> 63 == 0).then_some(card)
}

/// Writes `card` as the valid cached cardinality. `v` has a header.
pub fn set_cached_card(v: &mut [u8], card: u64) {
    v[8..HDR].copy_from_slice(&card.to_le_bytes());
}

/// Marks the cached cardinality stale (sets its bit 63, keeping the other bits as Redis does).
pub fn invalidate_cache(v: &mut [u8]) {
    v[CARD_MSB] |= 0x80;
}

// ----- the element hash ------------------------------------------------------------------

/// MurmurHash64A (MurmurHash2, 64-bit), as Redis computes it on every architecture: the
/// 8-byte blocks are read little-endian.
pub fn murmur64a(data: &[u8], seed: u64) -> u64 {
    const M: u64 = 0xc6a4_a793_5bd1_e995;
    const R: u32 = 47;
    let mut h = seed ^ (data.len() as u64).wrapping_mul(M);
    let mut blocks = data.chunks_exact(8);
    for block in blocks.by_ref() {
        let mut k = u64::from_le_bytes(block.try_into().expect("8-byte chunk"));
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h ^= k;
        h = h.wrapping_mul(M);
    }
    let tail = blocks.remainder();
    if !tail.is_empty() {
        for (i, &b) in tail.iter().enumerate() {
            h ^= u64::from(b) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> R;
    h = h.wrapping_mul(M);
    h ^= h >> R;
    h
}

/// The register an element goes to and the value it offers (Redis's `hllPatLen`): the low
/// 14 bits of the hash pick the register; the value is 1 + the number of zeros above them
/// before the first 1 (at most `Q + 1` = 51).
pub fn register_and_rank(element: &[u8]) -> (usize, u8) {
    let hash = murmur64a(element, SEED);
    let index = (hash & (REGISTERS as u64 - 1)) as usize;
    let rest = (hash >> P) | (1 << Q);
    (index, rest.trailing_zeros() as u8 + 1)
}

// ----- dense -----------------------------------------------------------------------------

/// Register `i` of a dense body (`body` is [`DENSE_BODY`] bytes).
#[inline]
pub fn dense_get(body: &[u8], i: usize) -> u8 {
    let byte = i * 6 / 8;
    let shift = (i * 6) % 8;
    let b0 = u16::from(body[byte]);
    let b1 = u16::from(body.get(byte + 1).copied().unwrap_or(0));
    (((b0 | (b1 << 8)) >> shift) & 63) as u8
}

/// Sets register `i` of a dense body to `v` (at most 63).
#[inline]
fn dense_put(body: &mut [u8], i: usize, v: u8) {
    let byte = i * 6 / 8;
    let shift = (i * 6) % 8;
    let mask = 63u16 << shift;
    let bits = u16::from(v & 63) << shift;
    body[byte] = (u16::from(body[byte]) & !mask | bits) as u8;
    if shift > 2 {
        body[byte + 1] = ((u16::from(body[byte + 1]) << 8 & !mask | bits) >> 8) as u8;
    }
}

/// Raises register `i` of a dense body to `v`; whether it changed (Redis's `hllDenseSet`).
#[inline]
pub fn dense_raise(body: &mut [u8], i: usize, v: u8) -> bool {
    if v > dense_get(body, i) {
        dense_put(body, i, v);
        true
    } else {
        false
    }
}

// ----- sparse ----------------------------------------------------------------------------

/// One sparse opcode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    /// `len` registers at 0, in `width` bytes (1 for ZERO, 2 for XZERO).
    Zero { len: usize, width: usize },
    /// `len` registers at `value`.
    Val { value: u8, len: usize },
}

impl Op {
    /// The opcode at `at` of `v` (`at < v.len()`); a byte past the end reads as 0, as
    /// Redis reads its string's NUL terminator.
    #[inline]
    fn at(v: &[u8], at: usize) -> Op {
        let b = v[at];
        match b >> 6 {
            0 => Op::Zero {
                len: usize::from(b & 0x3f) + 1,
                width: 1,
            },
            1 => {
                let low = v.get(at + 1).copied().unwrap_or(0);
                Op::Zero {
                    len: (usize::from(b & 0x3f) << 8 | usize::from(low)) + 1,
                    width: 2,
                }
            }
            _ => Op::Val {
                value: ((b >> 2) & 0x1f) + 1,
                len: usize::from(b & 3) + 1,
            },
        }
    }

    #[inline]
    fn span(self) -> usize {
        match self {
            Op::Zero { len, .. } | Op::Val { len, .. } => len,
        }
    }

    #[inline]
    fn width(self) -> usize {
        match self {
            Op::Zero { width, .. } => width,
            Op::Val { .. } => 1,
        }
    }
}

/// A VAL opcode's byte (`value` in 1..=32, `len` in 1..=4).
#[inline]
fn val_op(value: u8, len: usize) -> u8 {
    0x80 | (value - 1) << 2 | (len as u8 - 1)
}

/// Appends the shortest zero-run opcode for `len` registers (at most 16384).
fn push_zeros(seq: &mut Vec<u8>, len: usize) {
    if len > SPARSE_ZERO_MAX_LEN {
        let l = len - 1;
        seq.push(0x40 | (l >> 8) as u8);
        seq.push(l as u8);
    } else {
        seq.push((len - 1) as u8);
    }
}

/// Calls `f(first, len, value)` for each run of the sparse opcodes in `v[HDR..end]`
/// (`v` may hold bytes past `end`: an XZERO cut at `end` reads its low byte there, 0 if
/// none), stopping (and answering `Corrupt`) at a VAL run that would pass register 16383,
/// and answering `Corrupt` unless the runs cover exactly 16384 registers (Redis's walk in
/// `hllSparseToDense` and `hllMerge`).
fn sparse_runs(v: &[u8], end: usize, mut f: impl FnMut(usize, usize, u8)) -> Result<(), Bad> {
    let mut at = HDR;
    let mut idx = 0usize;
    while at < end {
        let op = Op::at(v, at);
        match op {
            Op::Zero { len, .. } => idx += len,
            Op::Val { value, len } => {
                if idx + len > REGISTERS {
                    return Err(Bad::Corrupt);
                }
                f(idx, len, value);
                idx += len;
            }
        }
        at += op.width();
    }
    if idx == REGISTERS {
        Ok(())
    } else {
        Err(Bad::Corrupt)
    }
}

/// The dense form of the sparse HLL `v[..end]` (Redis's `hllSparseToDense`): the header is
/// kept (magic, unused bytes and cached cardinality), the encoding becomes dense.
fn sparse_to_dense(v: &[u8], end: usize) -> Result<Vec<u8>, Bad> {
    let mut dense = Vec::with_capacity(DENSE_SIZE + 1);
    dense.extend_from_slice(&v[..HDR]);
    dense.resize(DENSE_SIZE, 0);
    dense[4] = 0;
    let body = &mut dense[HDR..];
    sparse_runs(v, end, |first, len, value| {
        for i in first..first + len {
            dense_put(body, i, value);
        }
    })?;
    Ok(dense)
}

/// An HLL being changed by one command: its bytes, then the one byte Redis keeps after
/// them (its string's NUL terminator). That byte is 0 except after Redis splits an XZERO
/// opcode cut at the end, whose split sequence's last byte lands there, where a later
/// opcode read finds it; modelling it keeps even such damaged values byte for byte
/// Redis's within a command. (Redis keeps it across commands too, in memory; a stored
/// value here does not, and reads 0 there again.)
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hll {
    buf: Vec<u8>,
}

impl Hll {
    /// A new, empty HLL as Redis creates it: sparse, one XZERO opcode for all 16384
    /// registers, a valid cached cardinality of 0.
    pub fn new_sparse() -> Self {
        let mut buf = Vec::with_capacity(HDR + 3);
        buf.extend_from_slice(b"HYLL\x01\0\0\0");
        buf.extend_from_slice(&[0; 8]);
        push_zeros(&mut buf, REGISTERS);
        buf.push(0);
        Hll { buf }
    }

    /// A stored value that passed [`encoding`], to change.
    pub fn from_value(v: &[u8]) -> Self {
        let mut buf = Vec::with_capacity(v.len() + 4);
        buf.extend_from_slice(v);
        buf.push(0);
        Hll { buf }
    }

    /// The value's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.buf[..self.end()]
    }

    /// The value's length.
    #[inline]
    fn end(&self) -> usize {
        self.buf.len() - 1
    }

    /// Marks the cached cardinality stale.
    pub fn invalidate_cache(&mut self) {
        invalidate_cache(&mut self.buf);
    }

    /// Makes the HLL dense if it is sparse.
    pub fn make_dense(&mut self) -> Result<(), Bad> {
        if self.buf[4] == 1 {
            let mut dense = sparse_to_dense(&self.buf, self.end())?;
            dense.push(0);
            self.buf = dense;
        }
        Ok(())
    }

    /// Raises register `index` to `count` (either encoding); whether it changed.
    pub fn raise(&mut self, index: usize, count: u8) -> Result<bool, Bad> {
        match self.buf[4] {
            0 => Ok(dense_raise(&mut self.buf[HDR..], index, count)),
            _ => self.sparse_raise(index, count),
        }
    }

    /// Turns the sparse HLL dense and raises the register there (Redis's `promote:`).
    fn promote(&mut self, index: usize, count: u8) -> Result<bool, Bad> {
        self.make_dense()?;
        dense_raise(&mut self.buf[HDR..], index, count);
        Ok(true)
    }

    /// Raises register `index` of the sparse HLL to `count` (Redis's `hllSparseSet`, byte
    /// for byte: the covering opcode is split in place, adjacent equal VALs around it are
    /// joined, and the HLL turns dense when `count` exceeds 32 or the value would grow past
    /// [`SPARSE_MAX_BYTES`]). Whether a register changed; `Corrupt` when the opcodes do not
    /// reach `index` (or, to turn dense, do not cover 16384 registers).
    fn sparse_raise(&mut self, index: usize, count: u8) -> Result<bool, Bad> {
        if count > SPARSE_VAL_MAX {
            return self.promote(index, count);
        }
        let end = self.end();
        // Step 1: the opcode covering `index`, the one before it, and its first register.
        let mut at = HDR;
        let mut prev = None;
        let mut first = 0usize;
        let mut op = None;
        while at < end {
            let o = Op::at(&self.buf, at);
            if index < first + o.span() {
                op = Some(o);
                break;
            }
            prev = Some(at);
            at += o.width();
            first += o.span();
        }
        let Some(op) = op else {
            return Err(Bad::Corrupt);
        };
        // Step 2: nothing to do, a trivial in-place update, or the split sequence.
        let last = first + op.span() - 1;
        let mut seq = Vec::with_capacity(5);
        match op {
            Op::Val { value, .. } if value >= count => return Ok(false),
            Op::Val { len: 1, .. } | Op::Zero { len: 1, width: 1 } => {
                self.buf[at] = val_op(count, 1);
            }
            Op::Zero { .. } => {
                if index != first {
                    push_zeros(&mut seq, index - first);
                }
                seq.push(val_op(count, 1));
                if index != last {
                    push_zeros(&mut seq, last - index);
                }
            }
            Op::Val { value, .. } => {
                if index != first {
                    seq.push(val_op(value, index - first));
                }
                seq.push(val_op(count, 1));
                if index != last {
                    seq.push(val_op(value, last - index));
                }
            }
        }
        if !seq.is_empty() {
            // Step 3: the sequence replaces the opcode, unless the value would grow too
            // long. An XZERO cut at the end counts its missing byte: the sequence's last
            // byte then lands past the new end, where Redis's terminator is.
            let width = op.width();
            let cut = at + width > end;
            if seq.len() > width && end + seq.len() - width > SPARSE_MAX_BYTES {
                return self.promote(index, count);
            }
            self.buf.splice(at..(at + width).min(end), seq);
            if cut {
                self.buf.pop();
            } else if let Some(t) = self.buf.last_mut() {
                *t = 0;
            }
        }
        // Step 4: join adjacent VALs of one value, scanning at most 5 opcodes from the one
        // before the change.
        let mut end = self.end();
        let mut p = prev.unwrap_or(HDR);
        let mut scan = 5;
        while p < end && scan > 0 {
            scan -= 1;
            match Op::at(&self.buf, p) {
                Op::Zero { width, .. } => p += width,
                Op::Val { value, len } => {
                    if p + 1 < end
                        && let Op::Val {
                            value: v2,
                            len: len2,
                        } = Op::at(&self.buf, p + 1)
                        && v2 == value
                        && len + len2 <= SPARSE_VAL_MAX_LEN
                    {
                        self.buf[p + 1] = val_op(value, len + len2);
                        self.buf.remove(p);
                        end -= 1;
                        self.buf[end] = 0;
                        continue;
                    }
                    p += 1;
                }
            }
        }
        self.invalidate_cache();
        Ok(true)
    }
}

// ----- merge and count -------------------------------------------------------------------

/// Raises each of `max` to the HLL `v`'s register (Redis's `hllMerge`). `v` passed
/// [`encoding`].
pub fn merge_into(max: &mut [u8; REGISTERS], v: &[u8]) -> Result<(), Bad> {
    match v[4] {
        0 => {
            let body = &v[HDR..];
            for (i, m) in max.iter_mut().enumerate() {
                *m = (*m).max(dense_get(body, i));
            }
            Ok(())
        }
        _ => sparse_runs(v, v.len(), |first, len, value| {
            for m in &mut max[first..first + len] {
                *m = (*m).max(value);
            }
        }),
    }
}

/// The register histogram of the HLL `v` (passed [`encoding`]); `Corrupt` for sparse
/// opcodes that do not cover exactly 16384 registers (Redis's `hllSparseRegHisto` does not
/// stop at an overrun, it only checks the total).
pub fn histogram(v: &[u8]) -> Result<Histogram, Bad> {
    let mut h = [0u64; 64];
    if v[4] == 0 {
        let body = &v[HDR..];
        for i in 0..REGISTERS {
            h[usize::from(dense_get(body, i))] += 1;
        }
        return Ok(h);
    }
    let mut at = HDR;
    let mut idx = 0u64;
    while at < v.len() {
        let op = Op::at(v, at);
        let value = match op {
            Op::Zero { .. } => 0,
            Op::Val { value, .. } => value,
        };
        h[usize::from(value)] += op.span() as u64;
        idx += op.span() as u64;
        at += op.width();
    }
    if idx == REGISTERS as u64 {
        Ok(h)
    } else {
        Err(Bad::Corrupt)
    }
}

/// The histogram of plain registers (one byte each).
pub fn raw_histogram(regs: &[u8; REGISTERS]) -> Histogram {
    let mut h = [0u64; 64];
    for &r in regs {
        h[usize::from(r & 63)] += 1;
    }
    h
}

/// Ertl's sigma (Redis's `hllSigma`).
fn sigma(mut x: f64) -> f64 {
    if x == 1.0 {
        return f64::INFINITY;
    }
    let mut y = 1.0;
    let mut z = x;
    loop {
        x *= x;
        let z_prev = z;
        z += x * y;
        y += y;
        if z == z_prev {
            return z;
        }
    }
}

/// Ertl's tau (Redis's `hllTau`).
fn tau(mut x: f64) -> f64 {
    if x == 0.0 || x == 1.0 {
        return 0.0;
    }
    let mut y = 1.0;
    let mut z = 1.0 - x;
    loop {
        x = x.sqrt();
        let z_prev = z;
        y *= 0.5;
        z -= (1.0 - x).powi(2) * y;
        if z == z_prev {
            return z / 3.0;
        }
    }
}

/// The cardinality estimate of a register histogram (Redis 7's `hllCount`: Ertl's improved
/// estimator, rounded half away from zero). A histogram no real HLL has (every register at
/// 51 or above) makes the estimate infinite; Redis's `llroundl` then yields the smallest
/// 64-bit integer on x86-64, and so does this.
pub fn estimate(h: &Histogram) -> u64 {
    let m = REGISTERS as f64;
    let mut z = m * tau((m - h[Q + 1] as f64) / m);
    for j in (1..=Q).rev() {
        z += h[j] as f64;
        z *= 0.5;
    }
    z += m * sigma(h[0] as f64 / m);
    let e = (ALPHA_INF * m * m / z).round();
    if e.is_finite() && e >= i64::MIN as f64 && e < i64::MAX as f64 {
        e as i64 as u64
    } else {
        i64::MIN as u64
    }
}
