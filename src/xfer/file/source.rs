//! The sender's side, independent of RDMA: listing the files to send ([`walk`]) and reading
//! one in chunks with a running BLAKE3 ([`Source`]).

use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use super::names::{sanitize, RelPath};
use super::proto::{Digest, Reason};
use crate::{Error, Result};

/// A file to send: the name the receiver gets and where it is here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceEntry {
    /// Relative name sent in HELLO.
    pub name: RelPath,
    /// Local path.
    pub path: PathBuf,
}

fn invalid(msg: String) -> Error {
    Error::InvalidArgument(msg)
}

/// Lists the regular files under `roots`, sorted by name. A file root is sent under its file
/// name; a directory root under `<its name>/<relative path>` (like `cp -r`). Inside a tree,
/// symlinks are not followed (skipped), nor are special files; a root itself may be a symlink.
/// Empty directories are not listed. Refuses names the receiver would refuse (non-UTF-8,
/// backslash, …) and the same name from two roots.
pub fn walk(roots: &[PathBuf]) -> Result<Vec<SourceEntry>> {
    let mut out = Vec::new();
    for root in roots {
        let meta = std::fs::metadata(root)
            .map_err(|e| Error::io(format!("stat {}", root.display()), e))?;
        let base = root.file_name().ok_or_else(|| {
            invalid(format!(
                "{}: has no file name to send it as",
                root.display()
            ))
        })?;
        let base = utf8(base, root)?;
        if meta.is_file() {
            out.push(entry(base.to_string(), root.clone())?);
        } else if meta.is_dir() {
            walk_dir(root, base, &mut out)?;
        } else {
            return Err(invalid(format!(
                "{}: not a file or directory",
                root.display()
            )));
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    if let Some(w) = out.windows(2).find(|w| w[0].name == w[1].name) {
        return Err(invalid(format!(
            "{} and {} would both be sent as {}",
            w[0].path.display(),
            w[1].path.display(),
            w[0].name
        )));
    }
    Ok(out)
}

fn utf8<'a>(s: &'a std::ffi::OsStr, path: &Path) -> Result<&'a str> {
    s.to_str()
        .ok_or_else(|| invalid(format!("{}: name is not UTF-8", path.display())))
}

fn entry(name: String, path: PathBuf) -> Result<SourceEntry> {
    let name =
        sanitize(&name).map_err(|e| invalid(format!("{}: cannot be sent: {e}", path.display())))?;
    Ok(SourceEntry { name, path })
}

fn walk_dir(dir: &Path, prefix: &str, out: &mut Vec<SourceEntry>) -> Result<()> {
    let rd = std::fs::read_dir(dir).map_err(|e| Error::io(format!("read {}", dir.display()), e))?;
    for de in rd {
        let de = de.map_err(|e| Error::io(format!("read {}", dir.display()), e))?;
        let path = de.path();
        // DirEntry::file_type does not follow symlinks.
        let ft = de
            .file_type()
            .map_err(|e| Error::io(format!("stat {}", path.display()), e))?;
        let name = format!("{prefix}/{}", utf8(&de.file_name(), &path)?);
        if ft.is_dir() {
            walk_dir(&path, &name, out)?;
        } else if ft.is_file() {
            out.push(entry(name, path)?);
        }
    }
    Ok(())
}

/// One file being read for sending: chunks in order, hashed as they are read.
#[derive(Debug)]
pub struct Source {
    file: File,
    path: PathBuf,
    size: u64,
    mode: u32,
    mtime: (i64, u32),
    offset: u64,
    hasher: blake3::Hasher,
}

fn read_err(path: &Path, what: impl std::fmt::Display) -> Error {
    Error::refused(Reason::ReadError, format!("{}: {what}", path.display()))
}

impl Source {
    /// Opens a regular file and records its size, mode and mtime (what HELLO announces).
    pub fn open(path: &Path) -> Result<Source> {
        let file = File::open(path).map_err(|e| read_err(path, e))?;
        let meta = file.metadata().map_err(|e| read_err(path, e))?;
        if !meta.is_file() {
            return Err(read_err(path, "not a regular file"));
        }
        Ok(Source {
            file,
            path: path.to_path_buf(),
            size: meta.len(),
            mode: meta.mode() & 0o7777,
            mtime: (meta.mtime(), meta.mtime_nsec().clamp(0, 999_999_999) as u32),
            offset: 0,
            hasher: blake3::Hasher::new(),
        })
    }

    /// Size at open; exactly this many bytes are sent.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Permission bits.
    pub fn mode(&self) -> u32 {
        self.mode
    }

    /// Modification time: seconds and nanoseconds since the epoch.
    pub fn mtime(&self) -> (i64, u32) {
        self.mtime
    }

    /// Next offset to read.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// For `--resume`: hashes the first `held` bytes and, if they match the receiver's `hash`,
    /// continues from `held` and returns true. On a mismatch (or `held` beyond the size) returns
    /// false and the source is unusable for this file. Must be called before any read.
    pub fn skip_verified(&mut self, held: u64, hash: &Digest) -> Result<bool> {
        if self.offset != 0 {
            return Err(invalid("skip_verified after reading".into()));
        }
        if held > self.size {
            return Ok(false);
        }
        let mut buf = vec![0u8; 1 << 20];
        while self.offset < held {
            let n = (held - self.offset).min(buf.len() as u64) as usize;
            self.read_into(&mut buf[..n])?;
        }
        Ok(blake3::Hash::from(*hash) == self.hasher.clone().finalize())
    }

    /// Reads the next chunk into `buf` (up to its length, less only at the end of the file) and
    /// returns the bytes read; 0 when the whole file has been read.
    pub fn read_chunk(&mut self, buf: &mut [u8]) -> Result<usize> {
        let n = (self.size - self.offset).min(buf.len() as u64) as usize;
        self.read_into(&mut buf[..n])?;
        Ok(n)
    }

    fn read_into(&mut self, buf: &mut [u8]) -> Result<()> {
        self.file.read_exact_at(buf, self.offset).map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                read_err(&self.path, "file shrank while being sent")
            } else {
                read_err(&self.path, e)
            }
        })?;
        self.hasher.update(buf);
        self.offset += buf.len() as u64;
        Ok(())
    }

    /// The BLAKE3 of the whole file, for FIN. Refuses if not all was read or the file's size
    /// changed meanwhile.
    pub fn finish(self) -> Result<Digest> {
        if self.offset != self.size {
            return Err(invalid(format!(
                "{}: finish after {} of {} bytes",
                self.path.display(),
                self.offset,
                self.size
            )));
        }
        let now = self
            .file
            .metadata()
            .map_err(|e| read_err(&self.path, e))?
            .len();
        if now != self.size {
            return Err(read_err(
                &self.path,
                format_args!("size changed from {} to {now} while being sent", self.size),
            ));
        }
        Ok(*self.hasher.finalize().as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn names(v: &[SourceEntry]) -> Vec<&str> {
        v.iter().map(|e| e.name.as_str()).collect()
    }

    #[test]
    fn walk_lists_tree_sorted_without_symlinks() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("top");
        std::fs::create_dir_all(root.join("b/c")).unwrap();
        std::fs::create_dir_all(root.join("empty")).unwrap();
        std::fs::write(root.join("z.txt"), b"z").unwrap();
        std::fs::write(root.join("b/c/deep"), b"d").unwrap();
        std::fs::write(root.join("a"), b"a").unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), b"s").unwrap();
        symlink(outside.path(), root.join("link_dir")).unwrap();
        symlink(outside.path().join("secret"), root.join("link_file")).unwrap();
        let single = t.path().join("single");
        std::fs::write(&single, b"1").unwrap();
        let v = walk(&[root.clone(), single.clone()]).unwrap();
        assert_eq!(names(&v), ["single", "top/a", "top/b/c/deep", "top/z.txt"]);
        assert_eq!(v[2].path, root.join("b/c/deep"));
    }

    #[test]
    fn walk_refuses_duplicates_and_unsendable_names() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("x")).unwrap();
        std::fs::create_dir_all(t.path().join("y")).unwrap();
        std::fs::write(t.path().join("x/f"), b"").unwrap();
        std::fs::write(t.path().join("y/f"), b"").unwrap();
        let e = walk(&[t.path().join("x/f"), t.path().join("y/f")]).unwrap_err();
        assert!(e.to_string().contains("both be sent as f"), "{e}");
        std::fs::write(t.path().join("x/back\\slash"), b"").unwrap();
        let e = walk(&[t.path().join("x")]).unwrap_err();
        assert!(e.to_string().contains("backslash"), "{e}");
        assert!(walk(&[t.path().join("missing")]).is_err());
    }

    #[test]
    fn chunks_and_hash() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("f");
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&p, &data).unwrap();
        let mut s = Source::open(&p).unwrap();
        assert_eq!(s.size(), 10_000);
        let mut buf = vec![0u8; 4096];
        let mut got = Vec::new();
        let mut sizes = Vec::new();
        loop {
            let n = s.read_chunk(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            sizes.push(n);
            got.extend_from_slice(&buf[..n]);
        }
        assert_eq!(sizes, [4096, 4096, 1808]);
        assert_eq!(got, data);
        assert_eq!(s.finish().unwrap(), *blake3::hash(&data).as_bytes());
    }

    #[test]
    fn resume_skips_only_verified_bytes() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("f");
        std::fs::write(&p, b"0123456789").unwrap();
        let mut s = Source::open(&p).unwrap();
        assert!(s
            .skip_verified(4, blake3::hash(b"0123").as_bytes())
            .unwrap());
        assert_eq!(s.offset(), 4);
        let mut buf = [0u8; 16];
        assert_eq!(s.read_chunk(&mut buf).unwrap(), 6);
        assert_eq!(&buf[..6], b"456789");
        assert_eq!(s.finish().unwrap(), *blake3::hash(b"0123456789").as_bytes());
        let mut s = Source::open(&p).unwrap();
        assert!(!s
            .skip_verified(4, blake3::hash(b"XXXX").as_bytes())
            .unwrap());
        let mut s = Source::open(&p).unwrap();
        assert!(!s.skip_verified(11, &[0; 32]).unwrap());
    }

    #[test]
    fn changed_file_detected() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("f");
        std::fs::write(&p, b"0123456789").unwrap();
        let mut s = Source::open(&p).unwrap();
        std::fs::write(&p, b"01").unwrap();
        let e = s.read_chunk(&mut [0u8; 16]).unwrap_err();
        assert_eq!(e.reason(), Some(Reason::ReadError));
        assert!(e.to_string().contains("shrank"), "{e}");
        let mut s = Source::open(&p).unwrap();
        s.read_chunk(&mut [0u8; 16]).unwrap();
        std::fs::write(&p, b"0123").unwrap();
        assert!(s.finish().unwrap_err().to_string().contains("size changed"));
    }
}
