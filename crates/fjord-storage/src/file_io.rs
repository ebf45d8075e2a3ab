//! File I/O that std does not offer on stable: a vectored positional write (a batch's rewritten
//! header and its untouched records in one system call, no copy joining them), a positional read
//! into uninitialised memory (no zero-fill before the kernel overwrites it), and `sendfile` from
//! a segment to a socket (fetch responses without a copy through user space), and the size and
//! free space of a log dir's filesystem (`statvfs`).
//!
//! The crate's only `unsafe` lives here; each block says why it is sound.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use bytes::{Bytes, BytesMut};

/// Writes all of `parts`, in order, at `position` of `file`, retrying short writes and EINTR.
pub fn write_all_vectored_at(file: &File, parts: &[&[u8]], mut position: u64) -> io::Result<()> {
    let mut parts: Vec<&[u8]> = parts.iter().copied().filter(|p| !p.is_empty()).collect();
    let mut first = 0;
    while first < parts.len() {
        let iovecs: Vec<libc::iovec> = parts
            .get(first..)
            .unwrap_or(&[])
            .iter()
            .map(|p| libc::iovec {
                iov_base: p.as_ptr() as *mut libc::c_void,
                iov_len: p.len(),
            })
            .collect();
        let count = libc::c_int::try_from(iovecs.len().min(1024))
            .map_err(|_| io::Error::other("too many write parts"))?;
        let offset = libc::off_t::try_from(position)
            .map_err(|_| io::Error::other("file position beyond off_t"))?;
        // SAFETY: every iovec points into a slice borrowed from `parts`, which lives until after
        // the call and is not mutated; `count` is at most `iovecs.len()`; the kernel only reads
        // from these buffers. The descriptor belongs to `file`, borrowed for the call.
        let written = unsafe { libc::pwritev(file.as_raw_fd(), iovecs.as_ptr(), count, offset) };
        if written < 0 {
            let error = io::Error::last_os_error();
            if error.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(error);
        }
        if written == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        let mut written = written as usize;
        position += written as u64;
        // Skip the parts fully written; trim the one written in part.
        while let Some(part) = parts.get_mut(first) {
            if written >= part.len() {
                written -= part.len();
                first += 1;
            } else {
                *part = part.get(written..).unwrap_or(&[]);
                break;
            }
        }
    }
    Ok(())
}

/// Reads exactly `len` bytes at `position` of `file` into a fresh buffer that is never
/// zero-filled. A file shorter than `position + len` is an `UnexpectedEof` error.
pub fn read_exact_at_uninit(file: &File, len: usize, position: u64) -> io::Result<Bytes> {
    let mut buf = BytesMut::with_capacity(len);
    while buf.len() < len {
        let filled = buf.len();
        let offset = libc::off_t::try_from(position + filled as u64)
            .map_err(|_| io::Error::other("file position beyond off_t"))?;
        let spare = buf.spare_capacity_mut();
        let want = spare.len().min(len - filled);
        // SAFETY: `spare` is the buffer's unused capacity, valid for writes of `want` bytes
        // (`want` ≤ its length); the kernel writes at most `want` bytes into it and nothing
        // reads the memory before the call returns. The descriptor belongs to `file`.
        let read = unsafe {
            libc::pread(
                file.as_raw_fd(),
                spare.as_mut_ptr().cast::<libc::c_void>(),
                want,
                offset,
            )
        };
        if read < 0 {
            let error = io::Error::last_os_error();
            if error.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(error);
        }
        if read == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        let new_len = filled + (read as usize).min(want);
        // SAFETY: pread initialised the first `read` bytes of the spare capacity (it never
        // reports more than it was asked for; the `min` makes that explicit), so the buffer's
        // first `new_len` bytes are initialised and within its capacity.
        unsafe { buf.set_len(new_len) };
    }
    Ok(buf.freeze())
}

/// Sends up to `count` bytes of `file` from `position` to `socket` with `sendfile(2)`: the kernel
/// hands page-cache pages to the socket, nothing is copied through user space. Returns the bytes
/// sent (0 when `position` is at or past the end of the file). On a non-blocking socket that is
/// full the error is of kind `WouldBlock`.
pub fn send_file(
    socket: BorrowedFd<'_>,
    file: &File,
    position: u64,
    count: usize,
) -> io::Result<usize> {
    let mut offset = libc::off_t::try_from(position)
        .map_err(|_| io::Error::other("file position beyond off_t"))?;
    loop {
        // SAFETY: both descriptors are open for the duration of the call (borrowed from live
        // owners); `offset` is a valid `off_t` the kernel reads and updates; no user memory is
        // read or written otherwise.
        let sent =
            unsafe { libc::sendfile(socket.as_raw_fd(), file.as_raw_fd(), &mut offset, count) };
        if sent < 0 {
            let error = io::Error::last_os_error();
            if error.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(error);
        }
        return Ok(sent as usize);
    }
}

/// The size of the filesystem holding `path` and the bytes an unprivileged writer may still use
/// there (`statvfs`: blocks and available blocks, times the fragment size).
pub fn volume_space(path: &Path) -> io::Result<(u64, u64)> {
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path holds a NUL byte"))?;
    let mut stats = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c_path` is a NUL-terminated string that outlives the call, and `stats` points to
    // writable memory of the size statvfs fills.
    let result = unsafe { libc::statvfs(c_path.as_ptr(), stats.as_mut_ptr()) };
    if result != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: statvfs returned 0, so it initialised the whole struct.
    let stats = unsafe { stats.assume_init() };
    Ok((
        stats.f_blocks.saturating_mul(stats.f_frsize),
        stats.f_bavail.saturating_mul(stats.f_frsize),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    #[test]
    fn vectored_write_lands_in_order_at_the_position() {
        let dir = tempfile::tempdir().unwrap();
        let file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.path().join("f"))
            .unwrap();
        file.write_all_at(b"0123456789", 0).unwrap();
        let big = vec![7u8; 300_000];
        write_all_vectored_at(&file, &[b"ab", b"", &big, b"cd"], 4).unwrap();
        let mut back = vec![0u8; 4 + 2 + big.len() + 2];
        file.read_exact_at(&mut back, 0).unwrap();
        assert_eq!(&back[..6], b"0123ab");
        assert!(back[6..6 + big.len()].iter().all(|b| *b == 7));
        assert_eq!(&back[6 + big.len()..], b"cd");
        write_all_vectored_at(&file, &[], 0).unwrap();
    }

    #[test]
    fn uninit_read_reads_exactly_or_fails() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, (0..=255u8).cycle().take(200_000).collect::<Vec<_>>()).unwrap();
        let file = File::open(&path).unwrap();
        let bytes = read_exact_at_uninit(&file, 100_000, 1000).unwrap();
        assert_eq!(bytes.len(), 100_000);
        assert!(bytes
            .iter()
            .enumerate()
            .all(|(i, b)| *b == ((i + 1000) % 256) as u8));
        assert_eq!(read_exact_at_uninit(&file, 0, 0).unwrap().len(), 0);
        assert_eq!(
            read_exact_at_uninit(&file, 10, 199_995).unwrap_err().kind(),
            io::ErrorKind::UnexpectedEof
        );
    }

    #[test]
    fn send_file_moves_a_file_range_to_a_socket() {
        use std::io::Read;
        use std::os::fd::AsFd;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"0123456789").unwrap();
        let file = File::open(&path).unwrap();
        let (a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut sent = 0;
        while sent < 6 {
            sent += send_file(a.as_fd(), &file, 2 + sent as u64, 6 - sent).unwrap();
        }
        assert_eq!(
            send_file(a.as_fd(), &file, 10, 4).unwrap(),
            0,
            "nothing past the end"
        );
        drop(a);
        let mut got = Vec::new();
        b.read_to_end(&mut got).unwrap();
        assert_eq!(got, b"234567");
    }

    #[test]
    fn volume_space_of_a_temp_dir() {
        let dir = tempfile::tempdir().unwrap();
        let (total, usable) = volume_space(dir.path()).unwrap();
        assert!(total > 0 && usable <= total, "{total} {usable}");
        assert!(volume_space(&dir.path().join("missing")).is_err());
    }
}
