//! Buffers idle connections gave back, one shelf per thread.
//!
//! A connection waiting for its peer with nothing open holds no read or
//! write buffer (`Codec::release_idle`). Freed to the allocator, a buffer
//! would be allocated again at the connection's next request, and buffers
//! of these sizes take the allocator's slow path: here they go to a shelf
//! of the thread instead, and the next connection to need one on that
//! thread takes it from there. A shelf keeps at most [`KEEP`] of each kind,
//! each of the kind's own size (one that grew is freed).

use bytes::BytesMut;
use std::cell::RefCell;
use std::thread::LocalKey;

/// The most buffers of one kind a thread keeps.
const KEEP: usize = 16;

/// A kind of buffer, by what it is for.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Spare {
    /// Frames read (`FramedRead`).
    Read,
    /// Frames to write (`FramedWrite`).
    Write,
}

thread_local! {
    static READ: RefCell<Vec<BytesMut>> = const { RefCell::new(Vec::new()) };
    static WRITE: RefCell<Vec<BytesMut>> = const { RefCell::new(Vec::new()) };
}

impl Spare {
    fn shelf(self) -> &'static LocalKey<RefCell<Vec<BytesMut>>> {
        match self {
            Spare::Read => &READ,
            Spare::Write => &WRITE,
        }
    }

    /// An empty buffer of `capacity` bytes, from the shelf when it has one.
    pub(crate) fn take(self, capacity: usize) -> BytesMut {
        self.shelf()
            .try_with(|shelf| shelf.borrow_mut().pop())
            .ok()
            .flatten()
            .unwrap_or_else(|| BytesMut::with_capacity(capacity))
    }

    /// Puts `buf` on the shelf, emptied, when it is a whole allocation of
    /// `capacity` bytes that nothing else holds and the shelf has room;
    /// frees it otherwise (only this hold goes).
    ///
    /// A write buffer is never split: it is whole at its kind's size, or it
    /// grew. A read buffer is what is left after the frames read were split
    /// from its front: narrower than the allocation, it is taken back whole
    /// only if no frame still holds any of it (`try_reclaim`, below its
    /// size, checks that). One that shows its kind's full size may be the
    /// tail of a larger allocation (grown for a large frame), which
    /// `try_reclaim` would not check: it is freed.
    pub(crate) fn give(self, mut buf: BytesMut, capacity: usize) {
        buf.clear();
        let whole = match self {
            Spare::Write => buf.capacity() == capacity,
            Spare::Read => {
                buf.capacity() < capacity
                    && buf.try_reclaim(capacity)
                    && buf.capacity() == capacity
            }
        };
        if !whole {
            return;
        }
        let _ = self.shelf().try_with(|shelf| {
            let mut shelf = shelf.borrow_mut();
            if shelf.len() < KEEP {
                shelf.push(buf);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_given_back_is_taken_again() {
        let mut buf = Spare::Write.take(1024);
        buf.extend_from_slice(b"frame");
        let at = buf.as_ptr();
        Spare::Write.give(buf, 1024);
        let again = Spare::Write.take(1024);
        assert_eq!(again.as_ptr(), at);
        assert!(again.is_empty());
        assert_eq!(again.capacity(), 1024);
    }

    #[test]
    fn a_buffer_that_grew_or_is_shared_is_freed() {
        let mut grown = Spare::Read.take(64);
        grown.reserve(1024);
        Spare::Read.give(grown, 64);
        let mut read = Spare::Read.take(64);
        read.extend_from_slice(b"a frame");
        let frame = read.split_to(7);
        Spare::Read.give(read, 64);
        let shelf = READ.with(|shelf| shelf.borrow().len());
        assert_eq!(shelf, 0);
        drop(frame);
    }

    #[test]
    fn a_read_buffer_is_shelved_only_whole_and_held_by_nothing_else() {
        READ.with(|shelf| shelf.borrow_mut().clear());
        let shelved = || READ.with(|shelf| shelf.borrow().len());
        // The frames split from its front are gone: taken back whole.
        let mut read = Spare::Read.take(64);
        read.extend_from_slice(b"a frame");
        drop(read.split_to(7));
        Spare::Read.give(read, 64);
        assert_eq!(shelved(), 1);
        assert_eq!(Spare::Read.take(64).capacity(), 64);
        // The tail of a larger allocation, of the kind's size exactly: freed.
        let mut grown = BytesMut::with_capacity(128);
        grown.extend_from_slice(&[0; 64]);
        let frame = grown.split_to(64);
        assert_eq!(grown.capacity(), 64);
        Spare::Read.give(grown, 64);
        assert_eq!(shelved(), 0);
        drop(frame);
    }
}
