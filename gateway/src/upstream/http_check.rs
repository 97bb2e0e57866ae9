//! The HTTP health check (`check = "http"`): one `GET` of the route's
//! `check_path` on a connection made as requests make it, with the
//! route's `check_host` (or the replica's authority) as `Host`; the answer
//! passes when its status is among `check_statuses` (2xx and 3xx by
//! default). Only the head is read: the connection is dropped after it,
//! never pooled. Unbounded here: the check's timeout bounds the caller.

use bytes::Bytes;
use http::Method;

use super::failure::ConnectFailure;
use super::health::HttpCheckFailure;
use super::http1::{ConnError, Connection};
use super::http2::H2Conn;
use crate::config::HttpCheck;

/// Informational heads (`103 Early Hints`) read past before the answer.
const MAX_INFORMATIONAL: usize = 4;

/// The check's verdict on `status`.
pub(super) fn judge(check: &HttpCheck, status: u16) -> Result<(), ConnectFailure> {
    match check.statuses.contains(status) {
        true => Ok(()),
        false => Err(ConnectFailure::HttpCheck(HttpCheckFailure::Status(status))),
    }
}

/// The request head of a check over HTTP/1.1.
pub(super) fn request_head(check: &HttpCheck, host: &str, out: &mut Vec<u8>) {
    out.extend_from_slice(b"GET ");
    out.extend_from_slice(check.path.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\nhost: ");
    out.extend_from_slice(host.as_bytes());
    out.extend_from_slice(
        b"\r\nuser-agent: picket-health-check\r\naccept: */*\r\nconnection: close\r\n\r\n",
    );
}

/// The check over an HTTP/1.1 connection.
pub(super) async fn http1(
    conn: &mut Connection,
    check: &HttpCheck,
    host: &str,
) -> Result<(), ConnectFailure> {
    request_head(check, host, conn.head_buffer());
    conn.write_head()
        .await
        .map_err(|_| ConnectFailure::HttpCheck(HttpCheckFailure::Closed))?;
    for _ in 0..=MAX_INFORMATIONAL {
        let head = conn.read_head(&Method::GET).await.map_err(|e| {
            ConnectFailure::HttpCheck(match e {
                ConnError::Closed | ConnError::Io(_) => HttpCheckFailure::Closed,
                ConnError::Parse(_) => HttpCheckFailure::Malformed,
            })
        })?;
        let status = head.status.as_u16();
        if !head.status.is_informational() || status == 101 {
            return judge(check, status);
        }
    }
    Err(ConnectFailure::HttpCheck(HttpCheckFailure::Malformed))
}

/// The check over an HTTP/2 connection (`scheme` is `http` for h2c).
pub(super) async fn http2(
    conn: &mut H2Conn,
    scheme: &str,
    check: &HttpCheck,
    host: &str,
) -> Result<(), ConnectFailure> {
    let closed = |_: h2::Error| ConnectFailure::HttpCheck(HttpCheckFailure::Closed);
    let request = http::Request::get(format!("{scheme}://{host}{}", check.path))
        .header(http::header::USER_AGENT, "picket-health-check")
        .header(http::header::ACCEPT, "*/*")
        .body(())
        .map_err(|_| ConnectFailure::HttpCheck(HttpCheckFailure::Malformed))?;
    let (response, _stream, _slot): (_, h2::SendStream<Bytes>, _) =
        conn.send(request, true).await.map_err(closed)?;
    let response = response.await.map_err(closed)?;
    judge(check, response.status().as_u16())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::StatusSet;

    fn check(statuses: &[&str]) -> HttpCheck {
        HttpCheck {
            path: "/healthz?full=1".into(),
            host: None,
            statuses: StatusSet(
                statuses
                    .iter()
                    .map(|s| StatusSet::entry(s).unwrap())
                    .collect(),
            ),
        }
    }

    #[test]
    fn the_request_asks_for_the_path_with_the_host_and_closes() {
        let mut head = Vec::new();
        request_head(&check(&["2xx"]), "app.internal:8080", &mut head);
        assert_eq!(
            String::from_utf8(head).unwrap(),
            "GET /healthz?full=1 HTTP/1.1\r\nhost: app.internal:8080\r\nuser-agent: picket-health-check\r\naccept: */*\r\nconnection: close\r\n\r\n"
        );
    }

    #[test]
    fn statuses_pass_by_the_set() {
        let default = HttpCheck {
            statuses: StatusSet::default_pass(),
            ..check(&["2xx"])
        };
        for (status, passes) in [(200, true), (204, true), (302, true), (399, true)] {
            assert_eq!(judge(&default, status).is_ok(), passes, "{status}");
        }
        for status in [199, 400, 404, 500, 503] {
            assert_eq!(
                judge(&default, status),
                Err(ConnectFailure::HttpCheck(HttpCheckFailure::Status(status)))
            );
        }
        let own = check(&["204", "401", "500-502"]);
        let passing: Vec<u16> = (100..600).filter(|s| judge(&own, *s).is_ok()).collect();
        assert_eq!(passing, [204, 401, 500, 501, 502]);
    }

    #[test]
    fn status_entries_parse_or_are_refused() {
        assert_eq!(StatusSet::entry("2xx"), Some((200, 299)));
        assert_eq!(StatusSet::entry(" 5XX "), Some((500, 599)));
        assert_eq!(StatusSet::entry("404"), Some((404, 404)));
        assert_eq!(StatusSet::entry("200-204"), Some((200, 204)));
        for bad in [
            "", "xx", "6xx", "0xx", "20xx", "99", "600", "204-200", "2x", "+200", "200-", "two",
        ] {
            assert_eq!(StatusSet::entry(bad), None, "{bad:?}");
        }
        let set = StatusSet(vec![(200, 299), (401, 401), (500, 502)]);
        assert_eq!(set.to_string(), "2xx, 401, 500-502");
    }
}
