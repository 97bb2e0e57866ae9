//! `deploy/kubernetes/`: every manifest is a Kubernetes object that
//! k8s-openapi reads without losing a field, the Role grants exactly what
//! a node reads, and the DaemonSet agrees with the configuration the
//! binary reads.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, ContainerPort, Namespace, Service, ServiceAccount,
};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use picket::config::Config;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/kubernetes")
}

/// Every document of every manifest, as JSON, with its file's name.
fn documents() -> Vec<(String, Value)> {
    let mut found = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .filter(|p| p.file_name().is_some_and(|n| n != "kustomization.yaml"))
        .collect();
    files.sort();
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        for document in serde_norway::Deserializer::from_str(&text) {
            let value = Value::deserialize(document).unwrap_or_else(|e| panic!("{name}: {e}"));
            if !value.is_null() {
                found.push((name.clone(), value));
            }
        }
    }
    found
}

use serde::Deserialize as _;

/// Reads `value` as a `T` and back: what the type does not know is lost,
/// so a field k8s-openapi does not know (a typo, a wrong level) fails.
fn typed<T: DeserializeOwned + Serialize>(name: &str, value: &Value) -> T {
    let object: T = serde_json::from_value(value.clone()).unwrap_or_else(|e| panic!("{name}: {e}"));
    let back = serde_json::to_value(&object).unwrap();
    assert_eq!(
        &back, value,
        "{name}: fields lost or changed on reading it as a Kubernetes object"
    );
    object
}

fn one<T: DeserializeOwned + Serialize>(kind: &str) -> T {
    let documents = documents();
    let mut of_kind = documents.iter().filter(|(_, v)| v["kind"] == kind);
    let (name, value) = of_kind.next().unwrap_or_else(|| panic!("no {kind}"));
    assert!(of_kind.next().is_none(), "one {kind}");
    typed(name, value)
}

#[test]
fn every_manifest_is_a_kubernetes_object_without_unknown_fields() {
    let documents = documents();
    let mut kinds = BTreeSet::new();
    for (name, value) in &documents {
        let kind = value["kind"].as_str().unwrap_or_default();
        match kind {
            "Namespace" => drop(typed::<Namespace>(name, value)),
            "ServiceAccount" => drop(typed::<ServiceAccount>(name, value)),
            "Role" => drop(typed::<Role>(name, value)),
            "RoleBinding" => drop(typed::<RoleBinding>(name, value)),
            "ConfigMap" => drop(typed::<ConfigMap>(name, value)),
            "Service" => drop(typed::<Service>(name, value)),
            "DaemonSet" => drop(typed::<DaemonSet>(name, value)),
            "NetworkPolicy" => drop(typed::<NetworkPolicy>(name, value)),
            "PodDisruptionBudget" => drop(typed::<PodDisruptionBudget>(name, value)),
            other => panic!("{name}: a {other:?} this test does not know"),
        }
        assert_eq!(
            value["metadata"]["namespace"].as_str().or(Some("picket")),
            Some("picket")
        );
        kinds.insert(kind.to_string());
    }
    assert_eq!(kinds.len(), 9, "{kinds:?}");

    // The kustomization lists every file, and only those.
    let text = std::fs::read_to_string(dir().join("kustomization.yaml")).unwrap();
    let kustomization: Value = serde_norway::from_str(&text).unwrap();
    let listed: BTreeSet<&str> = kustomization["resources"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let files: BTreeSet<String> = documents.iter().map(|(n, _)| n.clone()).collect();
    assert_eq!(listed, files.iter().map(String::as_str).collect());
}

#[test]
fn the_role_grants_exactly_list_and_watch_on_what_routes_come_from() {
    let role: Role = one("Role");
    let rules = role.rules.unwrap();
    let granted: BTreeSet<(String, String, String)> = rules
        .iter()
        .flat_map(|rule| {
            let groups = rule.api_groups.clone().unwrap_or_default();
            let resources = rule.resources.clone().unwrap_or_default();
            assert!(rule.resource_names.is_none() && rule.non_resource_urls.is_none());
            groups.into_iter().flat_map(move |g| {
                let verbs = rule.verbs.clone();
                resources.clone().into_iter().flat_map(move |r| {
                    let g = g.clone();
                    verbs
                        .clone()
                        .into_iter()
                        .map(move |v| (g.clone(), r.clone(), v))
                })
            })
        })
        .collect();
    assert_eq!(granted, read());
    let binding: RoleBinding = one("RoleBinding");
    assert_eq!(binding.role_ref.name, role.metadata.name.unwrap());
    let daemonset: DaemonSet = one("DaemonSet");
    let account = daemonset.spec.template.spec.unwrap().service_account_name;
    let subjects = binding.subjects.unwrap();
    assert_eq!(subjects.len(), 1);
    assert_eq!(Some(subjects[0].name.clone()), account);
}

/// What a node reads, as `(group, resource, verb)`: list and watch on pods
/// and services, and on the ingresses and secrets routes from Ingress
/// objects come from.
fn read() -> BTreeSet<(String, String, String)> {
    [
        ("", "pods"),
        ("", "services"),
        ("", "secrets"),
        ("networking.k8s.io", "ingresses"),
    ]
    .iter()
    .flat_map(|(g, r)| ["list", "watch"].map(|v| (g.to_string(), r.to_string(), v.to_string())))
    .collect()
}

/// The `(group, resource, verb)` triples a list of rules grants.
fn grants(rules: &[k8s_openapi::api::rbac::v1::PolicyRule]) -> BTreeSet<(String, String, String)> {
    let mut granted = BTreeSet::new();
    for rule in rules {
        assert!(rule.resource_names.is_none() && rule.non_resource_urls.is_none());
        for group in rule.api_groups.iter().flatten() {
            for resource in rule.resources.iter().flatten() {
                for verb in &rule.verbs {
                    granted.insert((group.clone(), resource.clone(), verb.clone()));
                }
            }
        }
    }
    granted
}

/// The documents of a kustomize component under `deploy/kubernetes/`, by
/// kind; its kustomization lists exactly its files.
fn component(name: &str) -> Vec<(String, Value)> {
    let dir = dir().join(name);
    let text = std::fs::read_to_string(dir.join("kustomization.yaml")).unwrap();
    let kustomization: Value = serde_norway::from_str(&text).unwrap();
    assert_eq!(kustomization["kind"], "Component", "{name}");
    let listed: BTreeSet<String> = kustomization["resources"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    let files: BTreeSet<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml") && n != "kustomization.yaml")
        .collect();
    assert_eq!(listed, files, "{name}: the kustomization lists every file");
    files
        .iter()
        .map(|file| {
            let text = std::fs::read_to_string(dir.join(file)).unwrap();
            (file.clone(), serde_norway::from_str(&text).unwrap())
        })
        .collect()
}

#[test]
fn the_namespace_components_grant_list_and_watch_to_the_nodes_account() {
    let expected = read();
    let daemonset: DaemonSet = one("DaemonSet");
    let account = daemonset.spec.template.spec.unwrap().service_account_name;
    let subject_is_the_node = |subjects: Option<Vec<k8s_openapi::api::rbac::v1::Subject>>| {
        let subjects = subjects.unwrap();
        assert_eq!(subjects.len(), 1);
        assert_eq!(Some(subjects[0].name.clone()), account);
        assert_eq!(subjects[0].namespace.as_deref(), Some("picket"));
    };

    let namespaced = component("namespaces");
    let role: Role = typed("namespaces/role.yaml", &namespaced[0].1);
    let binding: RoleBinding = typed("namespaces/rolebinding.yaml", &namespaced[1].1);
    assert_eq!(grants(&role.rules.unwrap()), expected);
    assert_eq!(role.metadata.namespace, binding.metadata.namespace);
    assert_ne!(role.metadata.namespace.as_deref(), Some("picket"));
    assert_eq!(binding.role_ref.kind, "Role");
    subject_is_the_node(binding.subjects);

    let all = component("all-namespaces");
    let role: k8s_openapi::api::rbac::v1::ClusterRole =
        typed("all-namespaces/clusterrole.yaml", &all[0].1);
    let binding: k8s_openapi::api::rbac::v1::ClusterRoleBinding =
        typed("all-namespaces/clusterrolebinding.yaml", &all[1].1);
    assert_eq!(grants(&role.rules.unwrap()), expected);
    assert_eq!(binding.role_ref.kind, "ClusterRole");
    assert_eq!(Some(binding.role_ref.name), role.metadata.name);
    subject_is_the_node(binding.subjects);
}

/// Where the DaemonSet mounts Secret `picket-tls`.
const TLS_MOUNT: &str = "/run/secrets/picket-tls";

/// The container's port named `name`.
fn declared<'a>(container: &'a Container, name: &str) -> &'a ContainerPort {
    container
        .ports
        .as_ref()
        .unwrap()
        .iter()
        .find(|p| p.name.as_deref() == Some(name))
        .unwrap_or_else(|| panic!("no port {name}"))
}

/// The number and protocol of the container's port named `name`.
fn port(container: &Container, name: &str) -> (i32, String) {
    let port = declared(container, name);
    (
        port.container_port,
        port.protocol.clone().unwrap_or_else(|| "TCP".into()),
    )
}

#[test]
fn the_daemonset_agrees_with_the_configuration_the_binary_reads() {
    let configmap: ConfigMap = one("ConfigMap");
    let text = &configmap.data.as_ref().unwrap()["picket.toml"];
    // The certificate where the Secret is mounted, made here: the
    // configuration is read as the node reads it, files checked.
    let secrets = tempfile::tempdir().unwrap();
    let mounted_tls = Path::new(TLS_MOUNT);
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["example.com".to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    std::fs::write(secrets.path().join("tls.crt"), cert.pem()).unwrap();
    std::fs::write(secrets.path().join("tls.key"), key.serialize_pem()).unwrap();
    let here = format!("{}/", secrets.path().display());
    let config = Config::parse(
        "configmap picket.toml",
        &text.replace(&format!("{TLS_MOUNT}/"), &here),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let daemonset: DaemonSet = one("DaemonSet");
    let pod = daemonset.spec.template.spec.unwrap();
    let container = &pod.containers[0];

    // Ports: the configuration's, with their protocols.
    let feed = config.node.feed.as_ref().unwrap().addr.port();
    let gossip = config.cluster.as_ref().unwrap().gossip.port();
    let https = config.node.listen_tls.as_ref().expect("an HTTPS listener");
    for (name, expected) in [
        ("http", (i32::from(config.node.listen.value.port()), "TCP")),
        ("https", (i32::from(https.value.port()), "TCP")),
        ("admin", (i32::from(config.node.admin.value.port()), "TCP")),
        ("feed", (i32::from(feed), "UDP")),
        ("gossip", (i32::from(gossip), "UDP")),
    ] {
        let (number, protocol) = port(container, name);
        assert_eq!((number, protocol.as_str()), expected, "port {name}");
    }

    // The proxy's ports on the machine's own addresses.
    for name in ["http", "https"] {
        let port = declared(container, name);
        assert_eq!(
            port.host_port,
            Some(port.container_port),
            "hostPort of {name}"
        );
    }

    // Probes: /readyz and /healthz on the admin port.
    let probe = |probe: &Option<k8s_openapi::api::core::v1::Probe>| {
        let get = probe.as_ref().unwrap().http_get.clone().unwrap();
        (get.path.unwrap(), serde_json::to_value(&get.port).unwrap())
    };
    assert_eq!(
        probe(&container.readiness_probe),
        ("/readyz".into(), Value::from("admin"))
    );
    assert_eq!(
        probe(&container.liveness_probe),
        ("/healthz".into(), Value::from("admin"))
    );

    // The command line and the files: the configuration where --config
    // says, the key where key_file says.
    let args = container.args.clone().unwrap();
    let at = args.iter().position(|a| a == "--config").unwrap();
    let config_path = Path::new(&args[at + 1]);
    let mounts = container.volume_mounts.clone().unwrap();
    let mounted = |path: &Path| {
        let mount = mounts
            .iter()
            .find(|m| path.parent() == Some(Path::new(&m.mount_path)))
            .unwrap_or_else(|| panic!("nothing mounted at {}", path.display()));
        let volume = pod
            .volumes
            .as_ref()
            .unwrap()
            .iter()
            .find(|v| v.name == mount.name)
            .unwrap();
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        (volume.clone(), file)
    };
    let (volume, file) = mounted(config_path);
    assert_eq!(
        volume.config_map.unwrap().name,
        configmap.metadata.name.unwrap()
    );
    assert_eq!(file, "picket.toml");
    let key_file = config.cluster.as_ref().unwrap().key_file.clone().unwrap();
    let (volume, file) = mounted(&key_file);
    assert_eq!(
        volume.secret.unwrap().secret_name.unwrap(),
        "picket-gossip-key"
    );
    assert_eq!(file, "key");
    // The certificate and key: Secret `picket-tls` (kubernetes.io/tls:
    // tls.crt and tls.key), where the configuration reads them.
    assert_eq!(config.certificates.len(), 1);
    for (path, expected) in [
        (&config.certificates[0].cert, "tls.crt"),
        (&config.certificates[0].key, "tls.key"),
    ] {
        let in_pod = mounted_tls.join(path.strip_prefix(secrets.path()).unwrap());
        let (volume, file) = mounted(&in_pod);
        assert_eq!(volume.secret.unwrap().secret_name.unwrap(), "picket-tls");
        assert_eq!(file, expected);
    }
    // Secret files belong to root: the pod's group owns them (fsGroup) so
    // that the node's user, not root, reads them.
    let security = pod.security_context.clone().unwrap();
    assert!(security.run_as_user.is_some_and(|u| u != 0));
    assert_eq!(security.fs_group, security.run_as_group, "fsGroup");
    for volume in pod.volumes.as_ref().unwrap() {
        if let Some(secret) = &volume.secret {
            let mode = secret.default_mode.unwrap_or(0o644);
            assert_eq!(mode & 0o400, 0o400, "{}: the owner reads it", volume.name);
            assert_eq!(mode & 0o007, 0, "{}: nobody else reads it", volume.name);
        }
    }

    // The environment the binary reads.
    let env: BTreeSet<String> = container
        .env
        .clone()
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    for name in ["PICKET_NODE_NAME", "PICKET_ADVERTISE", "POD_NAMESPACE"] {
        assert!(env.contains(name), "{name} is set");
    }
    assert!(text.contains("[runtime]\nkind = \"kubernetes\""));

    // Seeds: the headless Service, publishing pods that are not ready yet.
    let service: Service = one("Service");
    let spec = service.spec.unwrap();
    assert_eq!(spec.cluster_ip.as_deref(), Some("None"));
    assert_eq!(spec.publish_not_ready_addresses, Some(true));
    let seed = format!(
        "{}.{}.svc.cluster.local:{gossip}",
        service.metadata.name.unwrap(),
        service.metadata.namespace.unwrap()
    );
    assert_eq!(config.cluster.as_ref().unwrap().seeds, [seed]);
}

#[test]
fn the_network_policy_admits_gossip_and_the_feed_from_picket_pods_only() {
    let policy: NetworkPolicy = one("NetworkPolicy");
    let rules = policy.spec.unwrap().ingress.unwrap();
    let admitting = |port: i32, protocol: &str| {
        rules
            .iter()
            .filter(|rule| {
                rule.ports.as_ref().is_some_and(|ports| {
                    ports.iter().any(|p| {
                        serde_json::to_value(&p.port).unwrap() == port
                            && p.protocol.as_deref() == Some(protocol)
                    })
                })
            })
            .collect::<Vec<_>>()
    };
    let gossip = admitting(7946, "UDP");
    assert_eq!(gossip.len(), 1);
    let from = serde_json::to_value(gossip[0].from.as_ref().unwrap()).unwrap();
    assert_eq!(
        from,
        serde_json::json!([{ "podSelector": { "matchLabels": { "app.kubernetes.io/name": "picket" } } }])
    );
    let feed = admitting(9901, "UDP");
    assert_eq!(feed.len(), 1);
    assert_eq!(
        feed[0].from.as_ref().unwrap().len(),
        2,
        "Picket pods and the operators' namespace"
    );
    // The proxy, plain and HTTPS, and the status API: from anywhere.
    for port in [8080, 8443, 9900] {
        let rules = admitting(port, "TCP");
        assert_eq!(rules.len(), 1, "port {port}");
        assert!(rules[0].from.is_none(), "port {port} from anywhere");
    }
}

#[test]
#[should_panic(expected = "fields lost or changed")]
fn a_misspelt_field_is_caught() {
    let role = serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": { "name": "picket" },
        "rulez": [],
    });
    let _: Role = typed("misspelt.yaml", &role);
}
