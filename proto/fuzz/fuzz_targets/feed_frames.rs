//! Whatever arrives on the feed or in gossip: frames are decoded, applied
//! to a follower, and gossip text is decoded, and none of it may panic or
//! allocate beyond the codec's limit.

#![no_main]

use libfuzzer_sys::fuzz_target;
use picket_proto::codec::decode_frame;
use picket_proto::feed::{Ask, Follower, Frame};
use picket_proto::{NodeInfo, Verdict, codec, gossip};

fuzz_target!(|data: &[u8]| {
    let mut follower = Follower::new();
    let mut rest = data;
    while let Ok((frame, used)) = decode_frame::<Frame>(rest) {
        let _ = follower.apply(frame);
        rest = &rest[used..];
    }
    let _ = codec::decode::<Ask>(data);
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = gossip::decode_value::<Verdict>(text);
        let _ = gossip::decode_value::<NodeInfo>(text);
    }
});
