//! Routes from Kubernetes Ingress objects, and certificates from the TLS
//! Secrets they name.
//!
//! A node serves the Ingresses whose `spec.ingressClassName` is its own
//! class (`[runtime] ingress_class`, default `picket`), in the namespaces
//! it watches. An Ingress without a class, or with the deprecated
//! `kubernetes.io/ingress.class` annotation alone, is left to the
//! cluster's default controller.
//!
//! Each path of each rule is one route to the backend Service of the
//! Ingress's namespace, by port number or by the Service port's name,
//! named `namespace/ingress/rule.path` (`namespace/ingress/default` for
//! its default backend); the namespace is its tenant
//! ([`crate::config::ownership`]);
//! `defaultBackend` is a route for any host and every path. A path of
//! type `Exact` matches itself alone; `Prefix` and `ImplementationSpecific`
//! match at a segment boundary. What cannot be served (a backend by
//! resource, no port) is still declared, with its problem, so that the
//! operator sees a red route that says why.

use super::objects::{HttpIngressPath, Ingress, IngressBackend, Secret};
use crate::config::declared::Declared;
use crate::targets::RuntimeCertificate;

/// The routes `ingress` declares, when it is of `class`.
pub fn routes(ingress: &Ingress, class: &str) -> Vec<Declared> {
    let Some(spec) = &ingress.spec else {
        return Vec::new();
    };
    if spec.ingress_class_name.as_deref() != Some(class) {
        return Vec::new();
    }
    let namespace = ingress.metadata.namespace.as_deref().unwrap_or("default");
    let name = ingress.metadata.name.as_deref().unwrap_or_default();
    let object = format!("{namespace}/{name}");
    let since_ms = ingress
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0.as_millisecond());
    let declared = |at: String,
                    host: Option<&str>,
                    path: Option<&HttpIngressPath>,
                    backend: &IngressBackend| {
        let (path_text, exact) = match path {
            Some(p) => (
                p.path.clone().unwrap_or_else(|| "/".into()),
                p.path_type == "Exact",
            ),
            None => ("/".to_string(), false),
        };
        let mut fields = Vec::new();
        if let Some(host) = host {
            fields.push(("host".to_string(), host.to_string()));
        }
        fields.push(("path_prefix".to_string(), path_text.clone()));
        let (service, problem) = match &backend.service {
            Some(service) => {
                let port = service
                    .port
                    .as_ref()
                    .and_then(|port| match (&port.name, port.number) {
                        (Some(name), _) if !name.is_empty() => Some(name.clone()),
                        (_, Some(number)) => Some(number.to_string()),
                        _ => None,
                    });
                let problem = match port {
                    Some(port) => {
                        fields.push(("port".to_string(), port));
                        None
                    }
                    None => Some("the backend names no port of its Service".to_string()),
                };
                (format!("{namespace}/{}", service.name), problem)
            }
            None if backend.resource => (
                String::new(),
                Some(
                    "a backend by resource is not a Service; Picket serves Services only"
                        .to_string(),
                ),
            ),
            None => (
                String::new(),
                Some("the backend names no Service".to_string()),
            ),
        };
        let place = format!("{}{path_text}", host.unwrap_or("any host, "));
        Declared {
            kind: "ingress",
            object: object.clone(),
            tenant: Some(namespace.to_string()),
            since_ms,
            name: at,
            service,
            fields,
            prefix: format!("ingress {object}, {place}: "),
            exact_path: exact,
            problem,
        }
    };
    let mut routes = Vec::new();
    if let Some(backend) = &spec.default_backend {
        routes.push(declared("default".into(), None, None, backend));
    }
    for (r, rule) in spec.rules.iter().enumerate() {
        let Some(http) = &rule.http else { continue };
        for (p, path) in http.paths.iter().enumerate() {
            routes.push(declared(
                format!("{r}.{p}"),
                rule.host.as_deref(),
                Some(path),
                &path.backend,
            ));
        }
    }
    routes
}

/// The certificates of the TLS Secrets `ingress` names, when it is of
/// `class`: each Secret of its namespace of type `kubernetes.io/tls` with
/// both `tls.crt` and `tls.key`, asked to serve the `hosts` its entry
/// lists (and no other name: an entry without hosts asks for none). A
/// Secret named but absent is left out (the node serves the names without
/// it until it appears).
pub fn certificates<'a>(
    ingress: &Ingress,
    class: &str,
    secrets: impl Iterator<Item = &'a Secret> + Clone,
) -> Vec<RuntimeCertificate> {
    let Some(spec) = &ingress.spec else {
        return Vec::new();
    };
    if spec.ingress_class_name.as_deref() != Some(class) {
        return Vec::new();
    }
    let namespace = ingress.metadata.namespace.as_deref().unwrap_or("default");
    spec.tls
        .iter()
        .filter_map(|tls| Some((tls, tls.secret_name.as_deref()?)))
        .filter_map(|(tls, wanted)| {
            let secret = secrets.clone().find(|s| {
                s.metadata.name.as_deref() == Some(wanted)
                    && s.metadata.namespace.as_deref().unwrap_or("default") == namespace
            })?;
            if secret.type_.as_deref() != Some("kubernetes.io/tls") {
                return None;
            }
            let data = secret.data.as_ref()?;
            Some(RuntimeCertificate {
                source: format!("secret {namespace}/{wanted}"),
                hosts: tls.hosts.clone(),
                tenant: Some(namespace.to_string()),
                cert_pem: data.cert.as_ref()?.0.clone(),
                key_pem: data.key.as_ref()?.0.clone(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ingress(json: serde_json::Value) -> Ingress {
        serde_json::from_value(json).unwrap()
    }

    fn shop(class: &str) -> Ingress {
        ingress(serde_json::json!({
            "metadata": {
                "name": "shop", "namespace": "web",
                "creationTimestamp": "2026-12-01T00:00:00Z"
            },
            "spec": {
                "ingressClassName": class,
                "defaultBackend": { "service": { "name": "home", "port": { "number": 80 } } },
                "rules": [
                    { "host": "shop.example.com", "http": { "paths": [
                        { "path": "/cart", "pathType": "Exact",
                          "backend": { "service": { "name": "cart", "port": { "name": "http" } } } },
                        { "path": "/api", "pathType": "Prefix",
                          "backend": { "service": { "name": "api", "port": { "number": 8080 } } } },
                        { "path": "/static", "pathType": "ImplementationSpecific",
                          "backend": { "resource": { "kind": "StorageBucket", "name": "static" } } }
                    ] } },
                    { "host": "*.shop.example.com", "http": { "paths": [
                        { "pathType": "Prefix", "backend": { "service": { "name": "api" } } }
                    ] } },
                    { "host": "no-http.example.com" }
                ],
                "tls": [ { "hosts": ["shop.example.com"], "secretName": "shop-tls" } ]
            }
        }))
    }

    /// A declared route as the tests compare it: name, service, fields,
    /// exact path, problem.
    type Seen<'a> = (
        &'a str,
        &'a str,
        Vec<(&'a str, &'a str)>,
        bool,
        Option<&'a str>,
    );

    fn fields(d: &Declared) -> Vec<(&str, &str)> {
        d.fields
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect()
    }

    #[test]
    fn each_path_of_an_ingress_of_the_class_is_a_route() {
        assert!(routes(&shop("nginx"), "picket").is_empty(), "another class");
        let no_class = ingress(serde_json::json!({
            "metadata": { "name": "x", "namespace": "web" },
            "spec": { "rules": [] }
        }));
        assert!(routes(&no_class, "picket").is_empty(), "no class");

        let declared = routes(&shop("picket"), "picket");
        let got: Vec<Seen<'_>> = declared
            .iter()
            .map(|d| {
                (
                    d.name.as_str(),
                    d.service.as_str(),
                    fields(d),
                    d.exact_path,
                    d.problem.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (
                    "default",
                    "web/home",
                    vec![("path_prefix", "/"), ("port", "80")],
                    false,
                    None
                ),
                (
                    "0.0",
                    "web/cart",
                    vec![
                        ("host", "shop.example.com"),
                        ("path_prefix", "/cart"),
                        ("port", "http")
                    ],
                    true,
                    None
                ),
                (
                    "0.1",
                    "web/api",
                    vec![
                        ("host", "shop.example.com"),
                        ("path_prefix", "/api"),
                        ("port", "8080")
                    ],
                    false,
                    None
                ),
                (
                    "0.2",
                    "",
                    vec![("host", "shop.example.com"), ("path_prefix", "/static")],
                    false,
                    Some("a backend by resource is not a Service; Picket serves Services only")
                ),
                (
                    "1.0",
                    "web/api",
                    vec![("host", "*.shop.example.com"), ("path_prefix", "/")],
                    false,
                    Some("the backend names no port of its Service")
                ),
            ]
        );
        assert!(declared.iter().all(|d| d.kind == "ingress"
            && d.object == "web/shop"
            && d.tenant.as_deref() == Some("web")
            && d.since_ms == Some(1_796_083_200_000)));
        assert_eq!(declared[1].route_name(), "web/shop/0.0");
        assert_eq!(
            declared[1].prefix,
            "ingress web/shop, shop.example.com/cart: "
        );
        assert_eq!(declared[0].prefix, "ingress web/shop, any host, /: ");
    }

    #[test]
    fn the_tls_secrets_an_ingress_names_are_its_certificates() {
        let secret = |namespace: &str, name: &str, kind: &str, with_key: bool| -> Secret {
            let mut data = serde_json::json!({ "tls.crt": "Q0VSVA==" });
            if with_key {
                data["tls.key"] = "S0VZ".into();
            }
            serde_json::from_value(serde_json::json!({
                "metadata": { "name": name, "namespace": namespace },
                "type": kind,
                "data": data
            }))
            .unwrap()
        };
        let secrets = [
            secret("other", "shop-tls", "kubernetes.io/tls", true),
            secret("web", "shop-tls", "kubernetes.io/tls", true),
        ];
        let got = certificates(&shop("picket"), "picket", secrets.iter());
        assert_eq!(
            got,
            [RuntimeCertificate {
                source: "secret web/shop-tls".into(),
                hosts: vec!["shop.example.com".into()],
                tenant: Some("web".into()),
                cert_pem: b"CERT".to_vec(),
                key_pem: b"KEY".to_vec(),
            }]
        );
        assert!(certificates(&shop("nginx"), "picket", secrets.iter()).is_empty());
        let opaque = [secret("web", "shop-tls", "Opaque", true)];
        assert!(certificates(&shop("picket"), "picket", opaque.iter()).is_empty());
        let keyless = [secret("web", "shop-tls", "kubernetes.io/tls", false)];
        assert!(certificates(&shop("picket"), "picket", keyless.iter()).is_empty());
    }
}
