//! Out-of-band payloads: bulk bytes (large-object chunks) that travel beside a message
//! instead of inside its postcard encoding, so they are never copied into or out of a frame.
//!
//! A [`Payload`] is either [`Bytes`] (shared, reference-counted: the in-process and simulated
//! transports hand the same buffer to the receiver) or a [`FileSlice`] (a range of an open
//! file: the TCP transport sends it with `sendfile(2)`, so the bytes go from the page cache
//! to the socket without entering user space; other transports read it once). Either way the
//! receiver gets [`Bytes`] holding exactly the sender's bytes (spec large-objects.md §6,
//! invariant 9).
//!
//! A payload names its `stream`: transfers on different streams may travel on different bulk
//! connections (TCP) and are window-limited separately (WAN emulator), like the study's
//! parallel streams.

use bytes::Bytes;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

/// A range of an open file, sent without copying where the transport allows.
#[derive(Clone, Debug)]
pub struct FileSlice {
    file: Arc<File>,
    offset: u64,
    len: u64,
}

impl FileSlice {
    /// `len` bytes of `file` from `offset`.
    pub fn new(file: Arc<File>, offset: u64, len: u64) -> Self {
        Self { file, offset, len }
    }

    /// The file.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Where the range starts.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// How many bytes the range holds.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the range is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Reads the range (blocking: call it off the async threads).
    pub fn read_blocking(&self) -> io::Result<Bytes> {
        let len = usize::try_from(self.len)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "file slice too long"))?;
        let mut buf = vec![0u8; len];
        self.file.read_exact_at(&mut buf, self.offset)?;
        Ok(Bytes::from(buf))
    }
}

/// Where a payload's bytes are.
#[derive(Clone, Debug)]
pub enum PayloadData {
    /// In memory.
    Bytes(Bytes),
    /// In a file.
    File(FileSlice),
}

/// Bulk bytes travelling beside a message.
#[derive(Clone, Debug)]
pub struct Payload {
    data: PayloadData,
    stream: u32,
}

impl Payload {
    /// A payload of in-memory bytes, on stream 0.
    pub fn bytes(bytes: Bytes) -> Self {
        Self {
            data: PayloadData::Bytes(bytes),
            stream: 0,
        }
    }

    /// A payload read from a file range, on stream 0.
    pub fn file(slice: FileSlice) -> Self {
        Self {
            data: PayloadData::File(slice),
            stream: 0,
        }
    }

    /// The same payload on `stream`.
    pub fn on_stream(mut self, stream: u32) -> Self {
        self.stream = stream;
        self
    }

    /// The stream it travels on.
    pub fn stream(&self) -> u32 {
        self.stream
    }

    /// Its length in bytes.
    pub fn len(&self) -> u64 {
        match &self.data {
            PayloadData::Bytes(b) => b.len() as u64,
            PayloadData::File(f) => f.len(),
        }
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Where its bytes are.
    pub fn data(&self) -> &PayloadData {
        &self.data
    }

    /// Its bytes: the shared buffer itself, or the file range read on the blocking pool.
    pub async fn into_bytes(self) -> io::Result<Bytes> {
        match self.data {
            PayloadData::Bytes(b) => Ok(b),
            PayloadData::File(f) => tokio::task::spawn_blocking(move || f.read_blocking())
                .await
                .map_err(io::Error::other)?,
        }
    }
}

impl PartialEq for Payload {
    /// Byte equality for in-memory payloads; the same range of the same open file otherwise.
    fn eq(&self, other: &Self) -> bool {
        self.stream == other.stream
            && match (&self.data, &other.data) {
                (PayloadData::Bytes(a), PayloadData::Bytes(b)) => a == b,
                (PayloadData::File(a), PayloadData::File(b)) => {
                    Arc::ptr_eq(&a.file, &b.file) && a.offset == b.offset && a.len == b.len
                }
                _ => false,
            }
    }
}

impl Eq for Payload {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[tokio::test]
    async fn a_file_slice_reads_exactly_its_range() {
        let dir = std::env::temp_dir().join(format!("meridian-payload-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("slice");
        let mut f = File::create(&path).unwrap();
        f.write_all(b"0123456789").unwrap();
        let file = Arc::new(File::open(&path).unwrap());
        let p = Payload::file(FileSlice::new(file.clone(), 3, 4)).on_stream(2);
        assert_eq!((p.len(), p.stream()), (4, 2));
        assert_eq!(
            p.clone().into_bytes().await.unwrap(),
            Bytes::from_static(b"3456")
        );
        let past_end = Payload::file(FileSlice::new(file, 8, 4));
        assert!(
            past_end.into_bytes().await.is_err(),
            "a short file is an error"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
