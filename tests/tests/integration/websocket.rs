//! A WebSocket through the proxy outlives the first-answer bound: once the
//! upgrade is done, nothing bounds the connection.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use picket_tests::node::{TestNode, route};
use picket_tests::upstream::{Behaviour, Upstream};
use tokio_tungstenite::tungstenite::Message;

#[tokio::test]
async fn websocket_messages_flow_past_the_first_answer_bound() {
    let upstream = Upstream::start("ws", Behaviour::WebSocket).await;
    let node = TestNode::start(&route(
        "ws",
        "/",
        &[upstream.addr],
        "first_answer_timeout = \"1s\"",
    ));
    let url = format!("ws://{}/chat", node.proxy);
    let (mut ws, response) = tokio_tungstenite::connect_async(&url).await.unwrap();
    assert_eq!(response.status(), 101);
    let mut echoed = 0;
    // Ten round trips, 300 ms apart: 3 s, three times the bound.
    for i in 0..10 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        ws.send(Message::text(format!("ping {i}"))).await.unwrap();
        let reply = tokio::time::timeout(Duration::from_secs(2), ws.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(reply.into_text().unwrap().as_str(), format!("ping {i}"));
        echoed += 1;
    }
    assert_eq!(echoed, 10);
    // Then silence longer than the bound, and the connection still flows.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    ws.send(Message::text("after the silence")).await.unwrap();
    let reply = tokio::time::timeout(Duration::from_secs(2), ws.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(reply.into_text().unwrap().as_str(), "after the silence");
    ws.close(None).await.unwrap();
    assert_eq!(upstream.hits(), 1);
    node.stop().await;
}
