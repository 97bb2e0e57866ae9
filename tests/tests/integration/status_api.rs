//! The status API against its OpenAPI description (docs/status-api.openapi.json):
//! every endpoint's answer on a three-node cluster validates against the
//! documented schema, undocumented fields included (objects are closed).

use std::net::SocketAddr;
use std::time::Duration;

use picket_proto::Liveness;
use picket_tests::client;
use picket_tests::cluster::{key_file, section, view_until};
use picket_tests::node::TestNode;
use picket_tests::tls::TestCa;
use picket_tests::upstream::{Behaviour, Upstream};
use serde_json::{Value, json};

pub(crate) fn openapi() -> Value {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/status-api.openapi.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("the OpenAPI file"))
        .expect("valid JSON")
}

/// The schema of `path`'s answer with `status`, as a standalone JSON Schema.
fn schema(spec: &Value, path: &str, status: &str) -> Value {
    let schema =
        &spec["paths"][path]["get"]["responses"][status]["content"]["application/json"]["schema"];
    assert!(schema.is_object(), "{path} {status} is documented");
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$ref": schema["$ref"],
        "components": spec["components"],
    })
}

pub(crate) fn check(spec: &Value, path: &str, status: &str, answer: &Value) {
    let validator = jsonschema::validator_for(&schema(spec, path, status)).expect("a valid schema");
    let errors: Vec<String> = validator
        .iter_errors(answer)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{path} answer does not match the OpenAPI description:\n{}\n{answer:#}",
        errors.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_endpoint_answers_as_documented() {
    let spec = openapi();
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path(), "key");
    let up = Upstream::start("up", Behaviour::Echo).await;
    let refused: SocketAddr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let routes = format!(
        "[global]\ncheck_every = \"1s\"\n\
         [[route]]\nname = \"api\"\nhost = \"api.test\"\nreplicas = [\"{}\", \"{refused}\"]\nbreaker = {{ enabled = true }}\n\
         [[route]]\nname = \"billing\"\npath_prefix = \"/billing\"\nupstream = \"http://{}\"\n",
        up.addr, up.addr
    );
    let interval = Duration::from_millis(100);
    // The first node serves HTTPS too: its certificates are in `/v1/node`.
    let ca = TestCa::new("status CA");
    let certificate = ca.write_leaf(dir.path(), "edge", &["edge.test", "*.edge.test"]);
    let first = TestNode::start(&format!(
        "[node]\nname = \"n1\"\nfeed = \"127.0.0.1:0\"\nlisten_tls = \"127.0.0.1:0\"\n{}{routes}{}",
        section(&key, &[], interval),
        certificate.table()
    ));
    let seed = first.gossip_addr().await;
    let others: Vec<TestNode> = ["n2", "n3"]
        .iter()
        .map(|n| {
            TestNode::start(&format!(
                "[node]\nname = \"{n}\"\n{}{routes}",
                section(&key, &[seed], interval)
            ))
        })
        .collect();
    view_until(
        &first,
        "three alive, each with both verdicts",
        Duration::from_secs(10),
        |v| {
            v.members.len() == 3
                && v.members
                    .iter()
                    .all(|m| m.liveness == Liveness::Alive && m.verdicts.len() == 2)
        },
    )
    .await;
    // The refused replica ejected by a check: an ejected replica with its reason.
    first
        .verdict_until("api", "one replica ejected", Duration::from_secs(5), |v| {
            v.ready == 1
        })
        .await;

    for path in [
        "/v1/node",
        "/v1/routes",
        "/v1/routes/{name}",
        "/v1/nodes",
        "/v1/cluster",
    ] {
        let (status, answer) = first.admin_json(&path.replace("{name}", "api")).await;
        assert_eq!(status, 200, "{path}");
        check(&spec, path, "200", &answer);
    }
    let (status, missing) = first.admin_json("/v1/routes/nothing").await;
    assert_eq!(status, 404);
    check(&spec, "/v1/routes/{name}", "404", &missing);
    // A name no route can have is said back cut short, not whole.
    let huge = "x".repeat(4000);
    let (status, missing) = first.admin_json(&format!("/v1/routes/{huge}")).await;
    assert_eq!(status, 404);
    check(&spec, "/v1/routes/{name}", "404", &missing);
    let error = missing["error"].as_str().unwrap();
    assert!(
        error.len() < 320 && error.contains("(4000 characters)"),
        "{error}"
    );

    // Spot checks of meaning, beyond shape.
    let (_, node) = first.admin_json("/v1/node").await;
    let validator = jsonschema::validator_for(&schema(&spec, "/v1/node", "200")).unwrap();
    let mut undocumented = node.clone();
    undocumented["surprise"] = json!(1);
    let mut mistyped = node.clone();
    mistyped["members"]["alive"] = json!("three");
    assert!(
        !validator.is_valid(&undocumented) && !validator.is_valid(&mistyped),
        "the schema is not vacuous"
    );
    assert_eq!(
        (
            node["name"].as_str(),
            node["cluster"].as_str(),
            node["members"]["alive"].as_u64()
        ),
        (Some("n1"), Some("test"), Some(3))
    );
    assert_eq!(
        node["listen_tls"].as_str(),
        first.tls.map(|a| a.to_string()).as_deref()
    );
    assert_eq!(
        node["certificates"][0]["names"],
        json!(["edge.test", "*.edge.test"]),
        "{node:#}"
    );
    let (_, nodes) = first.admin_json("/v1/nodes").await;
    assert!(
        nodes["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|n| n["routes"] == 2 && n["info"]["version"].is_string())
    );
    let (_, routes) = first.admin_json("/v1/routes").await;
    let api = routes["routes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "api")
        .unwrap();
    assert!(
        api["replicas"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["state"] == "ejected" && r["reason"].is_string()),
        "{api:#}"
    );
    let (_, across) = first.admin_json("/v1/routes/billing").await;
    assert_eq!(across["nodes"].as_array().unwrap().len(), 3);
    assert_eq!(across["disagreement"], false);

    // The filters of /v1/cluster: those the description lists, and each
    // keeping what it says.
    let cluster = &spec["paths"]["/v1/cluster"]["get"];
    let documented: Vec<&str> = cluster["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(documented, picket::status::filter::Filter::NAMES);
    let kept = |answer: &Value| -> Vec<(String, String, String)> {
        let mut kept: Vec<(String, String, String)> = answer["members"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|m| {
                m["verdicts"].as_array().unwrap().iter().map(|v| {
                    (
                        m["name"].as_str().unwrap().to_string(),
                        v["route"].as_str().unwrap().to_string(),
                        v["heart"].as_str().unwrap().to_string(),
                    )
                })
            })
            .collect();
        kept.sort();
        kept
    };
    let (_, everything) = first.admin_json("/v1/cluster").await;
    let all = kept(&everything);
    assert_eq!(all.len(), 6, "{everything:#}");
    let filtered = async |query: &str| {
        let (status, answer) = first.admin_json(&format!("/v1/cluster?{query}")).await;
        assert_eq!(status, 200, "{query}");
        check(&spec, "/v1/cluster", "200", &answer);
        answer
    };
    let only = |keep: &dyn Fn(&(String, String, String)) -> bool| -> Vec<(String, String, String)> {
        all.iter().filter(|t| keep(t)).cloned().collect()
    };
    assert_eq!(
        kept(&filtered("route=billing").await),
        only(&|(_, route, _)| route == "billing")
    );
    for heart in ["green", "orange", "red"] {
        assert_eq!(
            kept(&filtered(&format!("heart={heart}")).await),
            only(&|(_, _, h)| h == heart),
            "{heart}"
        );
    }
    let one = filtered("node=n2").await;
    assert_eq!(one["members"].as_array().unwrap().len(), 1);
    assert_eq!(kept(&one), only(&|(node, _, _)| node == "n2"));
    assert_eq!(
        kept(&filtered("route=api&node=n3").await),
        only(&|(node, route, _)| node == "n3" && route == "api")
    );
    assert!(cluster["responses"]["400"].is_object(), "400 is documented");
    for (query, said) in [
        ("routes=api", "unknown filter"),
        ("heart=pink", "green, orange, red or stale"),
        ("route=a&route=b", "given twice"),
    ] {
        let answer = client::get(first.admin, "admin", &format!("/v1/cluster?{query}"))
            .await
            .unwrap();
        assert_eq!(answer.status, 400, "{query}");
        assert!(answer.text().contains(said), "{query}: {}", answer.text());
    }

    // Read-only.
    let post = client::send(
        first.admin,
        client::request(
            http::Method::POST,
            "admin",
            "/v1/cluster",
            bytes::Bytes::new(),
        ),
    )
    .await
    .unwrap();
    assert_eq!(post.status, 405);
    for node in others {
        node.stop().await;
    }
    first.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_routes_images_answer_as_documented() {
    use picket_tests::fake_kube::{FakeKube, Kind, pod, pulled, service, with_sidecar};

    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let spec = openapi();
    let kube = FakeKube::start("test").await;
    kube.apply(Kind::Services, &service("api", Some("api"), None, 80));
    let app = pod(
        "api-1",
        "api",
        Some("127.0.0.1"),
        8080,
        true,
        "shop/api:1.4",
    );
    let app = with_sidecar(app, "envoyproxy/envoy:v1.31");
    let digest = "sha256:4c0f12ab9d2e7f00aa11bb22cc33dd44ee55ff66aa77bb88cc99dd00ee11ff22";
    let app = pulled(app, &[&format!("shop/api@{digest}")]);
    kube.apply(Kind::Pods, &app);
    let node = TestNode::start(&format!(
        "[runtime]\nkind = \"kubernetes\"\napi = \"{}\"\nnamespace = \"test\"\n\
         [[route]]\nname = \"api\"\nservice = \"api\"\nport = \"http\"\n",
        kube.url()
    ));
    node.verdict_until("api", "the pod's images", Duration::from_secs(5), |v| {
        v.images.len() == 2
    })
    .await;
    let (status, routes) = node.admin_json("/v1/routes").await;
    assert_eq!(status, 200);
    check(&spec, "/v1/routes", "200", &routes);
    let route = &routes["routes"][0];
    assert_eq!(
        route["replicas"][0]["images"],
        json!(["api:1.4@sha256:4c0f12ab9d2e", "envoy:v1.31"]),
        "the sidecar's image not pulled yet: no digest known"
    );
    assert_eq!(
        route["verdict"]["images"],
        json!([
            { "image": "api:1.4@sha256:4c0f12ab9d2e", "replicas": 1 },
            { "image": "envoy:v1.31", "replicas": 1 },
        ])
    );
    node.stop().await;
}
