//! The decoder never allocates beyond the bounded frame: a counting global allocator records the
//! largest single allocation while hostile frames declaring huge lengths are decoded.
//! (One test in this binary, so no other test thread allocates during the measured window.)

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use bytes::Bytes;
use zlink_wire::*;

struct Counting;

static MEASURING: AtomicBool = AtomicBool::new(false);
static LARGEST: AtomicUsize = AtomicUsize::new(0);

// SAFETY: delegates to `System`; only records sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if MEASURING.load(Ordering::Relaxed) {
            LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        }
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if MEASURING.load(Ordering::Relaxed) {
            LARGEST.fetch_max(new_size, Ordering::Relaxed);
        }
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn envelope(command: u8, flags: u8, correlation: u64, body: &[u8]) -> Bytes {
    let mut bytes = vec![VERSION, command, flags, 0];
    bytes.extend_from_slice(&correlation.to_be_bytes());
    bytes.extend_from_slice(body);
    Bytes::from(bytes)
}

#[test]
fn huge_declared_lengths_never_allocate_beyond_the_frame() {
    let frames: Vec<Vec<Bytes>> = vec![
        // str32 / bin32 / array32 / map32 declaring 4 GiB.
        vec![envelope(
            128,
            0,
            0,
            &[0x94, 0xdb, 0xff, 0xff, 0xff, 0xff, b'a'],
        )],
        vec![envelope(
            128,
            0,
            0,
            &[
                0x94, 0xa4, b'm', b'a', b'i', b'n', 0xdb, 0xff, 0xff, 0xff, 0xff,
            ],
        )],
        vec![envelope(
            130,
            0,
            0,
            &[0x91, 0xc6, 0xff, 0xff, 0xff, 0xff, 0],
        )],
        vec![envelope(128, 0, 0, &[0xdd, 0xff, 0xff, 0xff, 0xff])],
        vec![envelope(128, 0, 0, &[0xdf, 0xff, 0xff, 0xff, 0xff])],
        // 146 detail declaring 4 GiB.
        vec![envelope(
            146,
            2,
            1,
            &[0x92, 0x01, 0xdb, 0xff, 0xff, 0xff, 0xff],
        )],
        // Valid ActorId of 128 bytes inside an actorCall.
        vec![
            envelope(
                160,
                1,
                0,
                &rmp_serde::to_vec(&("x".repeat(128), 1u64, 1u64, 1u64, 1u64, 1u32, ())).unwrap(),
            ),
            Bytes::from_static(b"p"),
        ],
    ];
    // 139 batch frames declaring huge counts and lengths, and one valid batch holding one of the
    // hostile envelopes above (its framing is fine; the sub-record fails to decode).
    let batch = |count: u32, sub: &[u8]| {
        let mut f = envelope(139, 0, 0, &count.to_be_bytes()).to_vec();
        f.extend_from_slice(sub);
        Bytes::from(f)
    };
    let hostile = &frames[0][0];
    let mut inner = vec![1u8];
    inner.extend_from_slice(&(hostile.len() as u32).to_be_bytes());
    inner.extend_from_slice(hostile);
    let batches = vec![
        batch(u32::MAX, &[]),
        batch(MAX_BATCH_RECORDS, &[1, 0xff, 0xff, 0xff, 0xff, 1]),
        batch(1, &[2, 0, 0, 0, 1, 0x01, 0xff, 0xff, 0xff, 0xff]),
        batch(1, &inner),
    ];
    let largest_frame = frames
        .iter()
        .flatten()
        .chain(&batches)
        .map(Bytes::len)
        .max()
        .unwrap();
    let mut batch_results = Vec::with_capacity(batches.len());
    MEASURING.store(true, Ordering::SeqCst);
    let mut results = Vec::with_capacity(frames.len());
    for parts in &frames {
        results.push(decode(parts, &Limits::DEFAULT).is_ok());
    }
    for b in &batches {
        batch_results.push(BatchFrame::parse(b.clone()).map(|f| {
            f.decode_all(&Limits::DEFAULT)
                .iter()
                .filter(|r| r.is_ok())
                .count()
        }));
    }
    MEASURING.store(false, Ordering::SeqCst);
    assert_eq!(results, [false, false, false, false, false, false, true]);
    assert!(batch_results[..3].iter().all(Result::is_err));
    assert_eq!(batch_results[3].as_ref().ok(), Some(&0));
    let largest = LARGEST.load(Ordering::SeqCst);
    println!("largest allocation while decoding: {largest} bytes (largest frame {largest_frame})");
    // rmp-serde's fixed 128-byte scratch buffer, error messages and the decoded record itself are
    // all small; nothing is sized by a declared length.
    assert!(
        largest <= 1024 + 2 * largest_frame,
        "largest allocation {largest} bytes"
    );
}
