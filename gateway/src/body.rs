//! Every body on the data path that is not a connection's own: the
//! client's request body ([`request`]: how it is read, kept for a replay,
//! held to `max_body`, and its typed error) and the answer sent to the
//! client ([`answer`]). A replica's answer body stays with the connection
//! it is read from, which it gives back to the pool at its end
//! (`upstream::http1`, `upstream::http2`); the HTTP/1 framing of every
//! body is the codec's (`gateway/h1/src/body.rs`).

mod answer;
mod request;

pub use answer::GatewayBody;
pub use request::{BodyError, IncomingBody, Limited, Replay, RequestBody};
