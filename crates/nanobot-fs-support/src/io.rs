//! Every file operation the file backends perform on their data, in one place.
//!
//! The session files, the journal, its cursor files, the memory documents, the damage
//! sidecars and the listing index are read and written only through these functions. They
//! are thin: each is the `std::fs` call it names. With the feature `test-util` a test can
//! watch them ([`crate::observe`]): count them, fail the N-th one with EIO, ENOSPC or a
//! short write, or record them so that [`crate::crash`] can build the states a power loss
//! could leave. Without the feature the watching compiles away.
//!
//! Not watched: `stat`, directory listings, `canonicalize` and the advisory locks (they
//! change no data), and what `gix` writes inside the versions repository (it does its own
//! I/O).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::Path;

/// One watched operation, as an observer sees it (feature `test-util`).
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Op<'a> {
    /// Opening a file; `create` when the call may create it, `truncate` when it empties it.
    Open {
        /// The file.
        path: &'a Path,
        /// The call may create the file.
        create: bool,
        /// The call empties the file.
        truncate: bool,
    },
    /// Writing `bytes` at `offset` of an open file.
    Write {
        /// The file's path when it was opened.
        path: &'a Path,
        /// The open file.
        file: &'a File,
        /// Where the bytes go.
        offset: u64,
        /// What is written.
        bytes: &'a [u8],
    },
    /// Cutting or growing an open file to `len` bytes.
    SetLen {
        /// The file's path when it was opened.
        path: &'a Path,
        /// The open file.
        file: &'a File,
        /// The new length.
        len: u64,
    },
    /// fsync (or fdatasync) of an open file.
    Sync {
        /// The file's path when it was opened.
        path: &'a Path,
        /// The open file.
        file: &'a File,
    },
    /// fsync of a directory, so its entries survive a power loss.
    SyncDir {
        /// The directory.
        path: &'a Path,
    },
    /// `rename(from, to)`, replacing `to`.
    Rename {
        /// The old name.
        from: &'a Path,
        /// The new name.
        to: &'a Path,
    },
    /// A hard link `to` of the file `from`, failing when `to` exists.
    Link {
        /// The file.
        from: &'a Path,
        /// The new name.
        to: &'a Path,
    },
    /// Removing a file's name.
    Remove {
        /// The file.
        path: &'a Path,
    },
    /// Creating a directory and its missing parents.
    CreateDir {
        /// The directory.
        path: &'a Path,
    },
    /// Removing a directory and everything in it.
    RemoveDir {
        /// The directory.
        path: &'a Path,
    },
    /// Reading a file (whole, or from an offset).
    Read {
        /// The file.
        path: &'a Path,
    },
}

impl Op<'_> {
    /// Whether the operation touches `root` or anything below it.
    pub fn is_under(&self, root: &Path) -> bool {
        match *self {
            Op::Rename { from, to } | Op::Link { from, to } => {
                from.starts_with(root) || to.starts_with(root)
            }
            Op::Open { path, .. }
            | Op::Write { path, .. }
            | Op::SetLen { path, .. }
            | Op::Sync { path, .. }
            | Op::SyncDir { path }
            | Op::Remove { path }
            | Op::CreateDir { path }
            | Op::RemoveDir { path }
            | Op::Read { path } => path.starts_with(root),
        }
    }
}

/// `EIO`: the device failed (the same number on every Unix).
pub const EIO: i32 = 5;
/// `ENOSPC`: no space left on the device (Linux, the BSDs and macOS agree).
pub const ENOSPC: i32 = 28;

#[cfg(feature = "test-util")]
use crate::observe::{after, before};

/// Without observers: nothing to ask, nothing to tell.
#[cfg(not(feature = "test-util"))]
#[inline(always)]
fn before(_op: &Op<'_>) -> io::Result<Option<usize>> {
    Ok(None)
}

#[cfg(not(feature = "test-util"))]
#[inline(always)]
fn after(_op: &Op<'_>) {}

/// What an observer can ask of an operation that is not a write: to fail it.
fn plain(op: &Op<'_>) -> io::Result<()> {
    match before(op)? {
        None => Ok(()),
        // A short write asked of anything else fails it.
        Some(_) => Err(io::Error::from_raw_os_error(EIO)),
    }
}

/// How [`open`] opens a file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Open {
    read: bool,
    write: bool,
    append: bool,
    create: bool,
    create_new: bool,
    truncate: bool,
}

impl Open {
    /// Read only.
    pub const READ: Open = Open {
        read: true,
        write: false,
        append: false,
        create: false,
        create_new: false,
        truncate: false,
    };
    /// Read and write an existing file.
    pub const READ_WRITE: Open = Open {
        read: true,
        write: true,
        ..Open::READ
    };
    /// Write, creating the file when it is missing, keeping what is in it.
    pub const WRITE_OR_CREATE: Open = Open {
        read: false,
        write: true,
        create: true,
        ..Open::READ
    };
    /// Read and write, creating the file when it is missing, keeping what is in it.
    pub const READ_WRITE_OR_CREATE: Open = Open {
        read: true,
        write: true,
        create: true,
        ..Open::READ
    };
    /// Append, creating the file when it is missing.
    pub const APPEND_OR_CREATE: Open = Open {
        read: false,
        write: true,
        append: true,
        create: true,
        ..Open::READ
    };
    /// Write a new file; fails with `AlreadyExists` when there is one.
    pub const CREATE_NEW: Open = Open {
        read: false,
        write: true,
        create_new: true,
        ..Open::READ
    };
    /// Write, creating or emptying the file.
    pub const TRUNCATE: Open = Open {
        read: false,
        write: true,
        create: true,
        truncate: true,
        ..Open::READ
    };

    fn options(self) -> OpenOptions {
        let mut options = OpenOptions::new();
        options
            .read(self.read)
            .write(self.write)
            .append(self.append)
            .create(self.create)
            .create_new(self.create_new)
            .truncate(self.truncate);
        options
    }
}

/// Opens `path` as `how` says.
pub fn open(path: &Path, how: Open) -> io::Result<File> {
    let op = Op::Open {
        path,
        create: how.create || how.create_new,
        truncate: how.truncate,
    };
    plain(&op)?;
    let file = how.options().open(path)?;
    after(&op);
    Ok(file)
}

/// Opens `path` as `how` says, with the given Unix permission bits when it creates it.
#[cfg(unix)]
pub fn open_with_mode(path: &Path, how: Open, mode: u32) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let op = Op::Open {
        path,
        create: how.create || how.create_new,
        truncate: how.truncate,
    };
    plain(&op)?;
    let file = how.options().mode(mode).open(path)?;
    after(&op);
    Ok(file)
}

/// Writes `bytes` at `offset` of `file` (opened from `path`). An observer may cut the write
/// short: then only its first bytes reach the file and the call fails with ENOSPC, as a full
/// disk does.
pub fn write_at(file: &File, path: &Path, offset: u64, bytes: &[u8]) -> io::Result<()> {
    let op = Op::Write {
        path,
        file,
        offset,
        bytes,
    };
    match before(&op)? {
        None => {
            write_all_at(file, offset, bytes)?;
            after(&op);
            Ok(())
        }
        Some(short) => {
            let part = &bytes[..short.min(bytes.len())];
            write_all_at(file, offset, part)?;
            after(&Op::Write {
                path,
                file,
                offset,
                bytes: part,
            });
            Err(io::Error::from_raw_os_error(ENOSPC))
        }
    }
}

#[cfg(unix)]
fn write_all_at(file: &File, offset: u64, bytes: &[u8]) -> io::Result<()> {
    std::os::unix::fs::FileExt::write_all_at(file, bytes, offset)
}

#[cfg(not(unix))]
fn write_all_at(file: &File, offset: u64, bytes: &[u8]) -> io::Result<()> {
    let mut file = file;
    file.seek(SeekFrom::Start(offset))?;
    file.write_all(bytes)
}

/// Appends `bytes` at the end of `file`; returns the offset they were written at.
pub fn append(file: &mut File, path: &Path, bytes: &[u8]) -> io::Result<u64> {
    let offset = file.seek(SeekFrom::End(0))?;
    let asked = before(&Op::Write {
        path,
        file: &*file,
        offset,
        bytes,
    })?;
    match asked {
        None => {
            file.write_all(bytes)?;
            after(&Op::Write {
                path,
                file: &*file,
                offset,
                bytes,
            });
            Ok(offset)
        }
        Some(short) => {
            let part = &bytes[..short.min(bytes.len())];
            file.write_all(part)?;
            after(&Op::Write {
                path,
                file: &*file,
                offset,
                bytes: part,
            });
            Err(io::Error::from_raw_os_error(ENOSPC))
        }
    }
}

/// Cuts (or grows) `file` to `len` bytes.
pub fn set_len(file: &File, path: &Path, len: u64) -> io::Result<()> {
    let op = Op::SetLen { path, file, len };
    plain(&op)?;
    file.set_len(len)?;
    after(&op);
    Ok(())
}

/// fdatasync: the file's bytes and length reach stable storage.
pub fn sync_data(file: &File, path: &Path) -> io::Result<()> {
    let op = Op::Sync { path, file };
    plain(&op)?;
    file.sync_data()?;
    after(&op);
    Ok(())
}

/// fsync: the file's bytes and all its metadata reach stable storage.
pub fn sync_all(file: &File, path: &Path) -> io::Result<()> {
    let op = Op::Sync { path, file };
    plain(&op)?;
    file.sync_all()?;
    after(&op);
    Ok(())
}

/// fsyncs the directory `path`.
pub fn sync_dir(path: &Path) -> io::Result<()> {
    let op = Op::SyncDir { path };
    plain(&op)?;
    File::open(path).and_then(|d| d.sync_all())?;
    after(&op);
    Ok(())
}

/// `rename(from, to)`.
pub fn rename(from: &Path, to: &Path) -> io::Result<()> {
    let op = Op::Rename { from, to };
    plain(&op)?;
    fs::rename(from, to)?;
    after(&op);
    Ok(())
}

/// A hard link `to` of `from`; fails with `AlreadyExists` when `to` exists.
pub fn hard_link(from: &Path, to: &Path) -> io::Result<()> {
    let op = Op::Link { from, to };
    plain(&op)?;
    fs::hard_link(from, to)?;
    after(&op);
    Ok(())
}

/// Removes the file `path`.
pub fn remove_file(path: &Path) -> io::Result<()> {
    let op = Op::Remove { path };
    plain(&op)?;
    fs::remove_file(path)?;
    after(&op);
    Ok(())
}

/// Creates `path` and its missing parents.
pub fn create_dir_all(path: &Path) -> io::Result<()> {
    if path.is_dir() {
        return Ok(());
    }
    let op = Op::CreateDir { path };
    plain(&op)?;
    fs::create_dir_all(path)?;
    after(&op);
    Ok(())
}

/// Removes the directory `path` and everything in it.
pub fn remove_dir_all(path: &Path) -> io::Result<()> {
    let op = Op::RemoveDir { path };
    plain(&op)?;
    fs::remove_dir_all(path)?;
    after(&op);
    Ok(())
}

/// Creates or empties `path` and writes `bytes` into it (not atomic: see
/// [`crate::write_atomic`]).
pub fn write(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let file = open(path, Open::TRUNCATE)?;
    write_at(&file, path, 0, bytes)
}

/// The whole file `path`.
pub fn read(path: &Path) -> io::Result<Vec<u8>> {
    plain(&Op::Read { path })?;
    fs::read(path)
}

/// The whole file `path` as text.
pub fn read_to_string(path: &Path) -> io::Result<String> {
    plain(&Op::Read { path })?;
    fs::read_to_string(path)
}

/// Everything in `file` from `offset` to its end.
pub fn read_from(file: &mut File, path: &Path, offset: u64) -> io::Result<Vec<u8>> {
    plain(&Op::Read { path })?;
    file.seek(SeekFrom::Start(offset))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Fills `buf` from `offset` of `file` as far as the file goes; how many bytes were read.
pub fn read_at(file: &File, path: &Path, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
    plain(&Op::Read { path })?;
    read_at_unwatched(file, offset, buf)
}

/// [`read_at`] without observers (the crash recorder reads with it).
pub(crate) fn read_at_unwatched(file: &File, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        let n = read_at_once(file, offset + done as u64, &mut buf[done..])?;
        if n == 0 {
            break;
        }
        done += n;
    }
    Ok(done)
}

#[cfg(unix)]
fn read_at_once(file: &File, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match std::os::unix::fs::FileExt::read_at(file, buf, offset) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

#[cfg(not(unix))]
fn read_at_once(file: &File, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
    let mut file = file;
    file.seek(SeekFrom::Start(offset))?;
    file.read(buf)
}
