//! Reading a small (inline) file whole, as cheaply as a tree of them needs: opened relative to
//! its directory, kept open from the file before (one path component to look up, not the whole
//! path), and read with one `read` when it holds what its listing said.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};

/// The directory of the last small file read, kept open.
#[derive(Default)]
pub(super) struct SmallReader {
    dir: Option<(PathBuf, OwnedFd)>,
}

impl SmallReader {
    /// Reads the file at `path`, listed with `size` bytes, into `data` (emptied first; its memory
    /// is used again): `size + 1` bytes if it has them (more if `data` held more), so a file
    /// that grew is seen; returns the bytes read. Symlinks are
    /// followed as `File::open` follows them (`--copy-links` lists a link's target).
    pub(super) fn read(&mut self, path: &Path, size: u64, data: &mut Vec<u8>) -> io::Result<usize> {
        let mut f = self.open(path)?;
        let want = usize::try_from(size)
            .ok()
            .and_then(|s| s.checked_add(1))
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        data.clear();
        data.reserve(want);
        // Into the spare capacity (at least `want` bytes): nothing to zero first.
        let n = loop {
            match rustix::io::read(&f, rustix::buffer::spare_capacity(data)) {
                Ok(n) => break n,
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        };
        // A read of a regular file that returns less than asked has met its end: the listed
        // size read at once needs no second call to see that, nor does one byte more (a file
        // that grew). Anything shorter (a file that shrank, or a short read) is read to its
        // end, at most one byte past the listed size.
        if n + 1 < want {
            (&mut f).take((want - n) as u64).read_to_end(data)?;
        }
        Ok(data.len())
    }

    fn open(&mut self, path: &Path) -> io::Result<File> {
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            return File::open(path);
        };
        let flags = OFlags::RDONLY | OFlags::CLOEXEC;
        if self.dir.as_ref().is_none_or(|(p, _)| p != parent) {
            self.dir = None;
            let at = if parent.as_os_str().is_empty() { Path::new(".") } else { parent };
            let fd = rustix::fs::open(at, flags | OFlags::DIRECTORY, Mode::empty())?;
            self.dir = Some((parent.to_path_buf(), fd));
        }
        let (_, dir) = self.dir.as_ref().expect("set above");
        Ok(File::from(rustix::fs::openat(dir, name, flags, Mode::empty())?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_whole_files_and_sees_growth_and_shrinking() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir(t.path().join("d")).unwrap();
        let mut r = SmallReader::default();
        let mut data = Vec::new();
        for (name, len) in [("a", 0usize), ("b", 1), ("c", 4096), ("d/e", 70_000)] {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
            std::fs::write(t.path().join(name), &bytes).unwrap();
            let n = r.read(&t.path().join(name), len as u64, &mut data).unwrap();
            assert_eq!((n, &data), (len, &bytes), "{name}");
            // Listed shorter than it is: one byte more is read, no more.
            if len > 0 {
                let n = r.read(&t.path().join(name), len as u64 - 1, &mut data).unwrap();
                assert_eq!(n, len, "{name} grew");
            }
            // Listed longer than it is: what is there.
            let n = r.read(&t.path().join(name), len as u64 + 5, &mut data).unwrap();
            assert_eq!(n, len, "{name} shrank");
        }
        // Missing: an error, and the next file of the same directory still reads.
        assert!(r.read(&t.path().join("gone"), 1, &mut data).is_err());
        assert_eq!(r.read(&t.path().join("b"), 1, &mut data).unwrap(), 1);
    }
}
