//! Spare buffers, one shelf per worker thread.
//!
//! An idle keep-alive connection gives its read buffer, head buffer and
//! header list back while it waits, so that it holds little more than its
//! socket. Freed to the allocator, they would be allocated again at the
//! next request of a busy connection, which waits between two requests
//! too: here they go to a shelf of the thread instead, and the next
//! connection to read on that thread takes them from it. A shelf keeps at
//! most [`KEEP`] of each kind, none over [`LARGEST`] bytes (a client that
//! sent a large head does not leave a large buffer on the shelf); the rest
//! are freed.

use std::cell::RefCell;
use std::thread::LocalKey;

use bytes::BytesMut;

use crate::h1::FieldAt;

/// The most buffers of one kind a thread keeps.
pub const KEEP: usize = 64;
/// The largest buffer a shelf keeps, in bytes: twice the read chunk.
pub const LARGEST: usize = 16 * 1024;

thread_local! {
    static READS: RefCell<Vec<BytesMut>> = const { RefCell::new(Vec::new()) };
    static HEADS: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
    static FIELDS: RefCell<Vec<Vec<FieldAt>>> = const { RefCell::new(Vec::new()) };
}

/// A buffer that can be shelved: emptied, and worth keeping.
pub trait Spare: Sized + Default + 'static {
    /// What it holds (its capacity counts these).
    type Item;
    fn shelf() -> &'static LocalKey<RefCell<Vec<Self>>>;
    fn capacity(&self) -> usize;
    fn clear(&mut self);
}

impl Spare for BytesMut {
    type Item = u8;
    fn shelf() -> &'static LocalKey<RefCell<Vec<Self>>> {
        &READS
    }
    fn capacity(&self) -> usize {
        BytesMut::capacity(self)
    }
    fn clear(&mut self) {
        BytesMut::clear(self);
    }
}

impl Spare for Vec<u8> {
    type Item = u8;
    fn shelf() -> &'static LocalKey<RefCell<Vec<Self>>> {
        &HEADS
    }
    fn capacity(&self) -> usize {
        Vec::capacity(self)
    }
    fn clear(&mut self) {
        Vec::clear(self);
    }
}

impl Spare for Vec<FieldAt> {
    type Item = FieldAt;
    fn shelf() -> &'static LocalKey<RefCell<Vec<Self>>> {
        &FIELDS
    }
    fn capacity(&self) -> usize {
        Vec::capacity(self)
    }
    fn clear(&mut self) {
        Vec::clear(self);
    }
}

/// Puts `buffer`'s allocation on this thread's shelf (or frees it, the
/// shelf full), leaving `buffer` empty and without one.
pub fn put<T: Spare>(buffer: &mut T) {
    let mut spare = std::mem::take(buffer);
    let bytes = spare.capacity() * std::mem::size_of::<T::Item>();
    if bytes == 0 || bytes > LARGEST {
        return;
    }
    spare.clear();
    T::shelf().with(|shelf| {
        let mut shelf = shelf.borrow_mut();
        if shelf.len() < KEEP {
            shelf.push(spare);
        }
    });
}

/// Gives `buffer` an allocation from this thread's shelf if it has none
/// and the shelf has one.
pub fn take<T: Spare>(buffer: &mut T) {
    if buffer.capacity() != 0 {
        return;
    }
    if let Some(spare) = T::shelf().with(|shelf| shelf.borrow_mut().pop()) {
        *buffer = spare;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shelved() -> usize {
        HEADS.with(|shelf| shelf.borrow().len())
    }

    /// Tests may share a thread: each starts with empty shelves.
    fn empty_shelves() {
        READS.with(|shelf| shelf.borrow_mut().clear());
        HEADS.with(|shelf| shelf.borrow_mut().clear());
        FIELDS.with(|shelf| shelf.borrow_mut().clear());
    }

    #[test]
    fn a_put_buffer_is_taken_back_empty_with_its_allocation() {
        empty_shelves();
        let mut head = Vec::with_capacity(512);
        head.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
        put(&mut head);
        assert_eq!(head.capacity(), 0, "the connection keeps no allocation");
        let mut next: Vec<u8> = Vec::new();
        take(&mut next);
        assert!(next.is_empty());
        assert!(next.capacity() >= 512, "the allocation is reused");
    }

    #[test]
    fn a_buffer_with_an_allocation_keeps_its_own() {
        empty_shelves();
        let mut spare: Vec<u8> = Vec::with_capacity(64);
        put(&mut spare);
        let mut own: Vec<u8> = Vec::with_capacity(16);
        take(&mut own);
        assert_eq!(own.capacity(), 16);
        let mut next: Vec<u8> = Vec::new();
        take(&mut next);
        assert!(next.capacity() >= 64);
    }

    #[test]
    fn a_shelf_keeps_at_most_keep_and_nothing_empty_or_large() {
        empty_shelves();
        for _ in 0..KEEP + 10 {
            put(&mut Vec::<u8>::with_capacity(8));
        }
        assert_eq!(shelved(), KEEP);
        put(&mut Vec::<u8>::new());
        assert_eq!(shelved(), KEEP);
        let mut large = BytesMut::with_capacity(LARGEST + 1);
        put(&mut large);
        assert_eq!(large.capacity(), 0, "given back to the allocator");
        assert_eq!(READS.with(|shelf| shelf.borrow().len()), 0, "not shelved");
        let mut reads = BytesMut::with_capacity(8192);
        reads.extend_from_slice(b"GET / HTTP/1.1\r\n");
        put(&mut reads);
        let mut next = BytesMut::new();
        take(&mut next);
        assert!(next.is_empty() && next.capacity() >= 8192);
    }
}
