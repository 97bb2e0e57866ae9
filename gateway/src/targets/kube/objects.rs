//! The parts of a Pod and of a Service that a node reads, and nothing else.
//!
//! The API server sends whole objects: a pod's volumes, probes, resources,
//! environment, managed fields. k8s-openapi's types decode and keep all of
//! it; a node needs a dozen fields. These types name only those (serde
//! skips the rest while decoding), so the watch stores hold those fields
//! and no more, and the binary carries no decoder for the rest of the
//! Kubernetes API. Field names follow the API's JSON;
//! `tests::fields_match_the_api` checks them against k8s-openapi's.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::{Deserialize, Deserializer};

/// A pod: its name, labels and whether it is terminating; the ports and
/// images of its containers; its address, readiness and the images the
/// kubelet reports.
#[derive(Debug, Clone, Deserialize)]
pub struct Pod {
    #[serde(default, deserialize_with = "meta")]
    pub metadata: ObjectMeta,
    pub spec: Option<PodSpec>,
    pub status: Option<PodStatus>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct PodSpec {
    /// The app containers; init and ephemeral containers are not read.
    #[serde(default, deserialize_with = "or_empty")]
    pub containers: Vec<Container>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Container {
    #[serde(default)]
    pub name: String,
    pub image: Option<String>,
    pub ports: Option<Vec<ContainerPort>>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ContainerPort {
    pub name: Option<String>,
    #[serde(rename = "containerPort", default)]
    pub container_port: i32,
}

#[derive(Debug, Clone, Deserialize)]
pub struct PodStatus {
    pub conditions: Option<Vec<PodCondition>>,
    #[serde(rename = "podIP")]
    pub pod_ip: Option<String>,
    #[serde(rename = "containerStatuses")]
    pub container_statuses: Option<Vec<ContainerStatus>>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct PodCondition {
    #[serde(rename = "type", default)]
    pub type_: String,
    #[serde(default)]
    pub status: String,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ContainerStatus {
    #[serde(default)]
    pub name: String,
    #[serde(default, deserialize_with = "or_empty")]
    pub image: String,
    #[serde(rename = "imageID", default, deserialize_with = "or_empty")]
    pub image_id: String,
}

/// A Service: its name, selector, cluster IP and ports.
#[derive(Debug, Clone, Deserialize)]
pub struct Service {
    #[serde(default, deserialize_with = "meta")]
    pub metadata: ObjectMeta,
    pub spec: Option<ServiceSpec>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ServiceSpec {
    pub ports: Option<Vec<ServicePort>>,
    pub selector: Option<BTreeMap<String, String>>,
    #[serde(rename = "clusterIP")]
    pub cluster_ip: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ServicePort {
    pub name: Option<String>,
    #[serde(default)]
    pub port: i32,
    #[serde(rename = "targetPort")]
    pub target_port: Option<IntOrString>,
}

/// An Ingress (`networking.k8s.io/v1`): its class, rules, default backend
/// and TLS.
#[derive(Debug, Clone, Deserialize)]
pub struct Ingress {
    #[serde(default, deserialize_with = "meta")]
    pub metadata: ObjectMeta,
    pub spec: Option<IngressSpec>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct IngressSpec {
    #[serde(rename = "ingressClassName")]
    pub ingress_class_name: Option<String>,
    #[serde(rename = "defaultBackend")]
    pub default_backend: Option<IngressBackend>,
    #[serde(default, deserialize_with = "or_empty")]
    pub rules: Vec<IngressRule>,
    #[serde(default, deserialize_with = "or_empty")]
    pub tls: Vec<IngressTls>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct IngressRule {
    pub host: Option<String>,
    pub http: Option<HttpIngressRuleValue>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct HttpIngressRuleValue {
    #[serde(default, deserialize_with = "or_empty")]
    pub paths: Vec<HttpIngressPath>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct HttpIngressPath {
    pub path: Option<String>,
    #[serde(rename = "pathType", default)]
    pub path_type: String,
    pub backend: IngressBackend,
}

#[derive(Debug, Clone, Deserialize)]
pub struct IngressBackend {
    pub service: Option<IngressServiceBackend>,
    /// A backend by resource: not a Service, which Picket cannot serve;
    /// only whether there is one is read.
    #[serde(default, deserialize_with = "present")]
    pub resource: bool,
}

#[derive(Debug, Clone, Deserialize)]
pub struct IngressServiceBackend {
    #[serde(default)]
    pub name: String,
    pub port: Option<ServiceBackendPort>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ServiceBackendPort {
    pub name: Option<String>,
    pub number: Option<i32>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct IngressTls {
    #[serde(default, deserialize_with = "or_empty")]
    pub hosts: Vec<String>,
    #[serde(rename = "secretName")]
    pub secret_name: Option<String>,
}

/// A Secret: its type and, of its data, the TLS certificate and key.
#[derive(Debug, Clone, Deserialize)]
pub struct Secret {
    #[serde(default, deserialize_with = "meta")]
    pub metadata: ObjectMeta,
    #[serde(rename = "type")]
    pub type_: Option<String>,
    pub data: Option<TlsData>,
}

/// A `kubernetes.io/tls` Secret's data; its other keys are skipped.
#[derive(Debug, Clone, Deserialize)]
pub struct TlsData {
    #[serde(rename = "tls.crt")]
    pub cert: Option<k8s_openapi::ByteString>,
    #[serde(rename = "tls.key")]
    pub key: Option<k8s_openapi::ByteString>,
}

/// Whether a field is there (and not `null`), without reading it.
fn present<'de, D: Deserializer<'de>>(deserializer: D) -> Result<bool, D::Error> {
    Ok(Option::<serde::de::IgnoredAny>::deserialize(deserializer)?.is_some())
}

/// The metadata a node reads: what names an object, what the watch
/// resumes from, the labels selectors match, when it was made (the older
/// of two declarers wins) and whether it is going away.
/// Annotations, owners and managed fields (often most of an object) are
/// skipped.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Meta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    labels: Option<BTreeMap<String, String>>,
    creation_timestamp: Option<Time>,
    deletion_timestamp: Option<Time>,
}

fn meta<'de, D: Deserializer<'de>>(deserializer: D) -> Result<ObjectMeta, D::Error> {
    let meta = Meta::deserialize(deserializer)?;
    Ok(ObjectMeta {
        name: meta.name,
        namespace: meta.namespace,
        uid: meta.uid,
        resource_version: meta.resource_version,
        labels: meta.labels,
        creation_timestamp: meta.creation_timestamp,
        deletion_timestamp: meta.deletion_timestamp,
        ..ObjectMeta::default()
    })
}

/// `null` read as the empty value, as k8s-openapi reads it.
fn or_empty<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// What kube needs to list and watch a namespaced kind of `group`
/// (`""`: the core group) at version `v1`.
macro_rules! v1 {
    ($type:ident, $group:literal, $api_version:literal, $kind:literal, $plural:literal) => {
        impl k8s_openapi::Resource for $type {
            const API_VERSION: &'static str = $api_version;
            const GROUP: &'static str = $group;
            const KIND: &'static str = $kind;
            const VERSION: &'static str = "v1";
            const URL_PATH_SEGMENT: &'static str = $plural;
            type Scope = k8s_openapi::NamespaceResourceScope;
        }

        impl k8s_openapi::Metadata for $type {
            type Ty = ObjectMeta;

            fn metadata(&self) -> &ObjectMeta {
                &self.metadata
            }

            fn metadata_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

v1!(Pod, "", "v1", "Pod", "pods");
v1!(Service, "", "v1", "Service", "services");
v1!(Secret, "", "v1", "Secret", "secrets");
v1!(
    Ingress,
    "networking.k8s.io",
    "networking.k8s.io/v1",
    "Ingress",
    "ingresses"
);

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1 as api;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;

    fn same_resource<Ours: k8s_openapi::Resource, Theirs: k8s_openapi::Resource>() {
        assert_eq!(Ours::API_VERSION, Theirs::API_VERSION);
        assert_eq!(Ours::GROUP, Theirs::GROUP);
        assert_eq!(Ours::KIND, Theirs::KIND);
        assert_eq!(Ours::VERSION, Theirs::VERSION);
        assert_eq!(Ours::URL_PATH_SEGMENT, Theirs::URL_PATH_SEGMENT);
    }

    /// Objects built with k8s-openapi's types and written as the API
    /// server writes them read back field for field: a misspelt name
    /// (`podIp` for `podIP`) would read as absent and fail here.
    #[test]
    fn fields_match_the_api() {
        same_resource::<Pod, api::Pod>();
        same_resource::<Service, api::Service>();
        same_resource::<Secret, api::Secret>();
        same_resource::<Ingress, k8s_openapi::api::networking::v1::Ingress>();
        let deleted = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        let metadata = ObjectMeta {
            name: Some("api-1".into()),
            namespace: Some("shop".into()),
            uid: Some("6a3c".into()),
            resource_version: Some("4711".into()),
            labels: Some(BTreeMap::from([("app".into(), "api".into())])),
            deletion_timestamp: Some(deleted.clone()),
            annotations: Some(BTreeMap::from([("note".into(), "x".repeat(4096))])),
            managed_fields: Some(vec![ManagedFieldsEntry {
                manager: Some("kubelet".into()),
                ..ManagedFieldsEntry::default()
            }]),
            ..ObjectMeta::default()
        };
        let theirs = api::Pod {
            metadata: metadata.clone(),
            spec: Some(api::PodSpec {
                containers: vec![api::Container {
                    name: "web".into(),
                    image: Some("shop/api:1.4".into()),
                    ports: Some(vec![api::ContainerPort {
                        name: Some("http".into()),
                        container_port: 8081,
                        ..api::ContainerPort::default()
                    }]),
                    ..api::Container::default()
                }],
                volumes: Some(vec![api::Volume {
                    name: "data".into(),
                    ..api::Volume::default()
                }]),
                ..api::PodSpec::default()
            }),
            status: Some(api::PodStatus {
                pod_ip: Some("10.1.0.7".into()),
                conditions: Some(vec![api::PodCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    ..api::PodCondition::default()
                }]),
                container_statuses: Some(vec![api::ContainerStatus {
                    name: "web".into(),
                    image: "registry.example.com/shop/api:1.4".into(),
                    image_id: "registry.example.com/shop/api@sha256:4c0f".into(),
                    ..api::ContainerStatus::default()
                }]),
                ..api::PodStatus::default()
            }),
        };
        let pod: Pod = serde_json::from_value(serde_json::to_value(&theirs).unwrap()).unwrap();
        assert_eq!(pod.metadata.name.as_deref(), Some("api-1"));
        assert_eq!(pod.metadata.namespace.as_deref(), Some("shop"));
        assert_eq!(pod.metadata.uid.as_deref(), Some("6a3c"));
        assert_eq!(pod.metadata.resource_version.as_deref(), Some("4711"));
        assert_eq!(pod.metadata.labels, metadata.labels);
        assert_eq!(pod.metadata.deletion_timestamp, Some(deleted));
        assert_eq!(
            (pod.metadata.annotations, pod.metadata.managed_fields),
            (None, None),
            "what the node does not read is not kept"
        );
        let spec = pod.spec.unwrap();
        let container = &spec.containers[0];
        assert_eq!(container.name, "web");
        assert_eq!(container.image.as_deref(), Some("shop/api:1.4"));
        let port = &container.ports.as_ref().unwrap()[0];
        assert_eq!(
            (port.name.as_deref(), port.container_port),
            (Some("http"), 8081)
        );
        let status = pod.status.unwrap();
        assert_eq!(status.pod_ip.as_deref(), Some("10.1.0.7"));
        let condition = &status.conditions.as_ref().unwrap()[0];
        assert_eq!(
            (condition.type_.as_str(), condition.status.as_str()),
            ("Ready", "True")
        );
        let running = &status.container_statuses.as_ref().unwrap()[0];
        assert_eq!(running.name, "web");
        assert_eq!(running.image, "registry.example.com/shop/api:1.4");
        assert_eq!(
            running.image_id,
            "registry.example.com/shop/api@sha256:4c0f"
        );

        let theirs = api::Service {
            metadata,
            spec: Some(api::ServiceSpec {
                cluster_ip: Some("10.96.0.12".into()),
                selector: Some(BTreeMap::from([("app".into(), "api".into())])),
                ports: Some(vec![api::ServicePort {
                    name: Some("web".into()),
                    port: 80,
                    target_port: Some(IntOrString::String("http".into())),
                    ..api::ServicePort::default()
                }]),
                ..api::ServiceSpec::default()
            }),
            status: None,
        };
        let service: Service =
            serde_json::from_value(serde_json::to_value(&theirs).unwrap()).unwrap();
        assert_eq!(service.metadata.name.as_deref(), Some("api-1"));
        let spec = service.spec.unwrap();
        assert_eq!(spec.cluster_ip.as_deref(), Some("10.96.0.12"));
        assert_eq!(spec.selector, theirs.spec.as_ref().unwrap().selector);
        let port = &spec.ports.as_ref().unwrap()[0];
        assert_eq!(port.name.as_deref(), Some("web"));
        assert_eq!(port.port, 80);
        assert_eq!(port.target_port, Some(IntOrString::String("http".into())));
    }

    /// An Ingress and a TLS Secret written by k8s-openapi read back field
    /// for field.
    #[test]
    fn ingresses_and_secrets_match_the_api() {
        use k8s_openapi::api::networking::v1 as net;
        let backend = |port: net::ServiceBackendPort| net::IngressBackend {
            service: Some(net::IngressServiceBackend {
                name: "cart".into(),
                port: Some(port),
            }),
            resource: None,
        };
        let theirs = net::Ingress {
            metadata: ObjectMeta {
                name: Some("shop".into()),
                namespace: Some("web".into()),
                ..ObjectMeta::default()
            },
            spec: Some(net::IngressSpec {
                ingress_class_name: Some("picket".into()),
                default_backend: Some(backend(net::ServiceBackendPort {
                    number: Some(8080),
                    name: None,
                })),
                rules: Some(vec![net::IngressRule {
                    host: Some("shop.example.com".into()),
                    http: Some(net::HTTPIngressRuleValue {
                        paths: vec![net::HTTPIngressPath {
                            path: Some("/cart".into()),
                            path_type: "Exact".into(),
                            backend: backend(net::ServiceBackendPort {
                                name: Some("http".into()),
                                number: None,
                            }),
                        }],
                    }),
                }]),
                tls: Some(vec![net::IngressTLS {
                    hosts: Some(vec!["shop.example.com".into()]),
                    secret_name: Some("shop-tls".into()),
                }]),
            }),
            status: None,
        };
        let ingress: Ingress =
            serde_json::from_value(serde_json::to_value(&theirs).unwrap()).unwrap();
        let spec = ingress.spec.unwrap();
        assert_eq!(spec.ingress_class_name.as_deref(), Some("picket"));
        let default = spec.default_backend.unwrap().service.unwrap();
        assert_eq!(default.port.unwrap().number, Some(8080));
        let rule = &spec.rules[0];
        assert_eq!(rule.host.as_deref(), Some("shop.example.com"));
        let path = &rule.http.as_ref().unwrap().paths[0];
        assert_eq!(
            (path.path.as_deref(), path.path_type.as_str()),
            (Some("/cart"), "Exact")
        );
        let service = path.backend.service.as_ref().unwrap();
        assert_eq!(service.name, "cart");
        assert_eq!(service.port.as_ref().unwrap().name.as_deref(), Some("http"));
        assert!(!path.backend.resource);
        assert_eq!(spec.tls[0].hosts, ["shop.example.com"]);
        assert_eq!(spec.tls[0].secret_name.as_deref(), Some("shop-tls"));

        let theirs = api::Secret {
            metadata: ObjectMeta {
                name: Some("shop-tls".into()),
                ..ObjectMeta::default()
            },
            type_: Some("kubernetes.io/tls".into()),
            data: Some(BTreeMap::from([
                ("tls.crt".into(), k8s_openapi::ByteString(b"CERT".to_vec())),
                ("tls.key".into(), k8s_openapi::ByteString(b"KEY".to_vec())),
                ("ca.crt".into(), k8s_openapi::ByteString(b"CA".to_vec())),
            ])),
            ..api::Secret::default()
        };
        let secret: Secret =
            serde_json::from_value(serde_json::to_value(&theirs).unwrap()).unwrap();
        assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/tls"));
        let data = secret.data.unwrap();
        assert_eq!(data.cert.unwrap().0, b"CERT");
        assert_eq!(data.key.unwrap().0, b"KEY");
    }

    /// `null` where a list or a string is expected reads as empty, not as
    /// an error that would fail the whole watch page.
    #[test]
    fn nulls_read_as_empty() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": { "name": "api-2", "labels": null },
            "spec": { "containers": null },
            "status": { "podIP": null, "containerStatuses": [{ "name": "web", "image": null, "imageID": null }] }
        }))
        .unwrap();
        assert!(pod.spec.unwrap().containers.is_empty());
        let status = pod.status.unwrap();
        let running = &status.container_statuses.as_ref().unwrap()[0];
        assert_eq!(
            (running.image.as_str(), running.image_id.as_str()),
            ("", "")
        );
    }
}
