//! `[[route]]`: what a route matches, where it sends, and its bounds and limits.

use super::*;

impl Validator<'_> {
    pub(super) fn route(
        &mut self,
        raw: &Spanned<RawRoute>,
        global: &GlobalSettings,
        runtime: &RuntimeSettings,
        dir: &Path,
        now: i64,
    ) -> Option<RouteConfig> {
        let raw = raw.get_ref();
        let before = self.problems.len();
        let name = raw.name.get_ref().clone();
        if !is_name(&name) {
            self.problem(
                raw.name.span(),
                format!("route name {name:?} must be 1 to 63 letters, digits, '.', '_' or '-'"),
            );
        }
        let host = raw.host.as_ref().and_then(|h| self.host(h));
        let path_prefix = match &raw.path_prefix {
            Some(p) => self.path_prefix(p),
            None => "/".to_string(),
        };
        let upstream = self.upstream(raw, runtime);
        let connect_timeout = self.inherit(
            &raw.connect_timeout,
            "connect_timeout",
            CONNECT_RANGE,
            &global.connect_timeout,
        );
        let first_answer_timeout = self.inherit(
            &raw.first_answer_timeout,
            "first_answer_timeout",
            FIRST_ANSWER_RANGE,
            &global.first_answer_timeout,
        );
        let eject_for = self.inherit(&raw.eject_for, "eject_for", EJECT_RANGE, &global.eject_for);
        let consecutive_gateway_errors = self.gateway_errors(
            raw.consecutive_gateway_errors.as_ref(),
            &global.consecutive_gateway_errors,
            Origin::Route,
        );
        let breaker = self.breaker(raw.breaker.as_ref(), &global.breaker, Origin::Route);
        let tries = match &raw.tries {
            Some(t) if TRIES_RANGE.contains(t.get_ref()) => {
                Setting::new(u32::try_from(*t.get_ref()).unwrap_or(1), Origin::Route)
            }
            Some(t) => {
                self.problem(t.span(), out_of_range("tries", t.get_ref(), &TRIES_RANGE));
                Setting::new(1, Origin::Route)
            }
            None => Setting::new(default_tries(upstream.as_ref()), Origin::Default),
        };
        let tls = raw
            .tls
            .as_ref()
            .and_then(|tls| self.upstream_tls(tls, upstream.as_ref(), dir, now));
        let speaks_tls = raw.tls.is_some()
            || matches!(&upstream, Some(UpstreamConfig::External(ext)) if ext.tls);
        let protocol = self.protocol(raw.protocol.as_ref(), speaks_tls);
        let check = self.check(raw);
        let check_every = raw
            .check_every
            .as_ref()
            .and_then(|e| self.duration(e, "check_every", CHECK_EVERY_RANGE));
        let check_timeout = raw
            .check_timeout
            .as_ref()
            .and_then(|t| self.duration(t, "check_timeout", CHECK_TIMEOUT_RANGE));
        if let (CheckKind::Grpc { .. }, Protocol::Http1, Some(span)) =
            (&check, protocol, raw.check.as_ref().map(|c| c.span()))
        {
            self.problem(
                span,
                "check = \"grpc\" speaks HTTP/2: set `protocol = \"h2c\"` (or \"h2\" over TLS)",
            );
        }
        let strip_prefix = raw.strip_prefix.as_ref().is_some_and(|s| *s.get_ref());
        if let Some(strip) = raw.strip_prefix.as_ref().filter(|s| *s.get_ref())
            && path_prefix == "/"
        {
            self.problem(
                strip.span(),
                "strip_prefix needs the route's path_prefix (other than \"/\") to strip",
            );
        }
        let add_prefix = raw.add_prefix.as_ref().map(|p| self.add_prefix(p));
        let request_headers = global
            .request_headers
            .then(&self.header_rules(raw.request_headers.as_ref(), "request_headers"));
        let response_headers = global
            .response_headers
            .then(&self.header_rules(raw.response_headers.as_ref(), "response_headers"));
        let max_body = self.max_body(raw.max_body.as_ref(), &global.max_body, Origin::Route);
        let rate = raw.rate.as_ref().and_then(|r| self.rate(r));
        if self.problems.len() > before {
            return None;
        }
        Some(RouteConfig {
            name,
            host,
            path_prefix,
            exact_path: false,
            declared_by: None,
            upstream: upstream?,
            connect_timeout: connect_timeout?,
            first_answer_timeout: first_answer_timeout?,
            tries,
            eject_for: eject_for?,
            consecutive_gateway_errors,
            breaker,
            body_timeout: global.body_timeout.value,
            underscores_in_headers: global.underscores_in_headers.value,
            trusted_proxies: global.trusted_proxies.value.clone(),
            https_only: raw.https_only.as_ref().is_some_and(|h| *h.get_ref()),
            tls,
            protocol,
            check,
            check_every,
            check_timeout,
            strip_prefix,
            add_prefix,
            request_headers,
            response_headers,
            max_body,
            rate,
        })
    }

    /// A route's `protocol`; `h2` and `auto` need TLS (ALPN), `h2c` is
    /// HTTP/2 in clear and cannot have it.
    pub(super) fn protocol(&mut self, raw: Option<&Spanned<String>>, speaks_tls: bool) -> Protocol {
        let Some(raw) = raw else {
            return Protocol::Http1;
        };
        let protocol = match raw.get_ref().as_str() {
            "http1" => Protocol::Http1,
            "h2c" => Protocol::H2c,
            "h2" => Protocol::H2,
            "auto" => Protocol::Auto,
            other => {
                self.problem(
                    raw.span(),
                    format!(
                        "protocol {other:?} is not one of \"http1\", \"h2c\", \"h2\", \"auto\""
                    ),
                );
                return Protocol::Http1;
            }
        };
        match protocol {
            Protocol::H2 | Protocol::Auto if !speaks_tls => self.problem(
                raw.span(),
                format!(
                    "protocol = {:?} is HTTP/2 over TLS: give the route `tls = {{ ... }}` or an https:// upstream, or use \"h2c\" for HTTP/2 in clear",
                    protocol.name()
                ),
            ),
            Protocol::H2c if speaks_tls => self.problem(
                raw.span(),
                "protocol = \"h2c\" is HTTP/2 in clear, but this route speaks TLS: use \"h2\" (or \"auto\")",
            ),
            _ => {}
        }
        protocol
    }

    /// A route's `check`, with what belongs to its kind: `grpc_service`
    /// for `grpc`; `check_path`, `check_host` and `check_statuses` for
    /// `http`. A setting of another kind is refused, not ignored.
    pub(super) fn check(&mut self, raw: &RawRoute) -> CheckKind {
        let kind = match raw.check.as_ref() {
            None => "connect",
            Some(check) => match check.get_ref().as_str() {
                kind @ ("connect" | "grpc" | "http") => kind,
                other => {
                    self.problem(
                        check.span(),
                        format!("check {other:?} is not one of \"connect\", \"grpc\", \"http\""),
                    );
                    return CheckKind::Connect;
                }
            },
        };
        if kind != "grpc"
            && let Some(service) = &raw.grpc_service
        {
            self.problem(
                service.span(),
                "grpc_service is the service a gRPC health check asks for: set `check = \"grpc\"` too",
            );
        }
        if kind != "http" {
            let http_only = [
                ("check_path", raw.check_path.as_ref().map(|s| s.span())),
                ("check_host", raw.check_host.as_ref().map(|s| s.span())),
                (
                    "check_statuses",
                    raw.check_statuses.as_ref().map(|s| s.span()),
                ),
            ];
            for (field, span) in http_only {
                if let Some(span) = span {
                    self.problem(
                        span,
                        format!(
                            "{field} belongs to an HTTP health check: set `check = \"http\"` too"
                        ),
                    );
                }
            }
        }
        match kind {
            "grpc" => CheckKind::Grpc {
                service: raw
                    .grpc_service
                    .as_ref()
                    .map(|s| s.get_ref().clone())
                    .unwrap_or_default(),
            },
            "http" => CheckKind::Http(HttpCheck {
                path: raw
                    .check_path
                    .as_ref()
                    .map_or_else(|| "/".to_string(), |p| self.check_path(p)),
                host: raw.check_host.as_ref().map(|h| self.check_host(h)),
                statuses: raw
                    .check_statuses
                    .as_ref()
                    .map_or_else(StatusSet::default_pass, |s| self.check_statuses(s)),
            }),
            _ => CheckKind::Connect,
        }
    }

    /// `check_path`: an origin-form target (`/healthz`, `/ready?full=1`)
    /// of visible ASCII, as it goes on the request line.
    fn check_path(&mut self, raw: &Spanned<String>) -> String {
        let path = raw.get_ref();
        let fine = path.starts_with('/')
            && path.len() <= 1024
            && path.bytes().all(|b| b.is_ascii_graphic() && b != b'#');
        if !fine {
            self.problem(
                raw.span(),
                format!(
                    "check_path {:?} must start with '/' and hold at most 1024 visible ASCII characters, no spaces or '#'",
                    path.chars().take(64).collect::<String>()
                ),
            );
        }
        path.clone()
    }

    /// `check_host`: a host name or address, with a port if wanted, as the
    /// `Host` header carries it.
    fn check_host(&mut self, raw: &Spanned<String>) -> String {
        let host = raw.get_ref();
        let (name, port) = match host.rsplit_once(':') {
            Some((name, port)) if !name.contains(':') || name.ends_with(']') => (name, Some(port)),
            _ => (host.as_str(), None),
        };
        let name_fine = is_dns_name(name)
            || name.parse::<std::net::Ipv4Addr>().is_ok()
            || name
                .strip_prefix('[')
                .and_then(|n| n.strip_suffix(']'))
                .is_some_and(|n| n.parse::<std::net::Ipv6Addr>().is_ok());
        let port_fine = port.is_none_or(|p| p.parse::<u16>().is_ok_and(|p| p > 0));
        if !(name_fine && port_fine) {
            self.problem(
                raw.span(),
                format!(
                    "check_host {:?} is not a host name or address (with an optional :port)",
                    host.chars().take(64).collect::<String>()
                ),
            );
        }
        host.to_ascii_lowercase()
    }

    /// `check_statuses`: `2xx`-style classes, statuses and ranges.
    fn check_statuses(&mut self, raw: &Spanned<RawStatuses>) -> StatusSet {
        let entries: Vec<String> = match raw.get_ref() {
            RawStatuses::One(code) => vec![code.to_string()],
            RawStatuses::Text(text) => text.split(',').map(str::to_string).collect(),
            RawStatuses::List(list) => list
                .iter()
                .map(|e| match e {
                    RawStatus::Code(code) => code.to_string(),
                    RawStatus::Text(text) => text.clone(),
                })
                .collect(),
        };
        let mut set = Vec::new();
        for text in entries {
            match StatusSet::entry(&text) {
                Some(range) => set.push(range),
                None => self.problem(
                    raw.span(),
                    format!(
                        "check_statuses entry {:?} is not a status (100 to 599), a class such as \"2xx\" or a range such as \"200-204\"",
                        text.trim().chars().take(32).collect::<String>()
                    ),
                ),
            }
        }
        if set.is_empty() {
            self.problem(raw.span(), "check_statuses is empty: no answer could pass");
        }
        StatusSet(set)
    }

    /// A route's `tls`: its files read from `dir` (when relative) and
    /// checked at `now`.
    pub(super) fn upstream_tls(
        &mut self,
        raw: &Spanned<RawUpstreamTls>,
        upstream: Option<&UpstreamConfig>,
        dir: &Path,
        now: i64,
    ) -> Option<UpstreamTls> {
        let span = raw.span();
        let raw = raw.get_ref();
        let external = match upstream {
            Some(UpstreamConfig::External(ext)) if !ext.tls => {
                self.problem(
                    span,
                    format!(
                        "`tls` with the plain-HTTP upstream {ext}: write it https:// to speak TLS"
                    ),
                );
                return None;
            }
            Some(UpstreamConfig::External(_)) => true,
            _ => false,
        };
        let server_name = match &raw.server_name {
            Some(name) => {
                if rustls::pki_types::ServerName::try_from(name.get_ref().as_str()).is_err() {
                    self.problem(
                        name.span(),
                        format!(
                            "server_name {:?} is neither a DNS name nor an IP address",
                            name.get_ref()
                        ),
                    );
                    return None;
                }
                Some(name.get_ref().clone())
            }
            None if external => None,
            None => {
                self.problem(
                    span,
                    "`tls` needs `server_name`: the name the replicas' certificates carry",
                );
                return None;
            }
        };
        let mut read = |field: &Spanned<String>, what: &str| -> Option<(PathBuf, Vec<u8>)> {
            let path = dir.join(field.get_ref());
            match std::fs::read(&path) {
                Ok(pem) => Some((path, pem)),
                Err(e) => {
                    self.problem(
                        field.span(),
                        format!("cannot read {what} {}: {e}", path.display()),
                    );
                    None
                }
            }
        };
        let ca = match &raw.ca {
            Some(field) => {
                let (path, pem) = read(field, "CA certificates")?;
                let found = <rustls::pki_types::CertificateDer as rustls::pki_types::pem::PemObject>::pem_slice_iter(&pem)
                    .filter(Result::is_ok)
                    .count();
                if found == 0 {
                    self.problem(
                        field.span(),
                        format!("{}: no PEM certificate in it", path.display()),
                    );
                    return None;
                }
                Some((path, pem))
            }
            None => None,
        };
        let client = match (&raw.client_cert, &raw.client_key) {
            (None, None) => None,
            (Some(cert), Some(key)) => {
                let (cert_path, cert_pem) = read(cert, "client certificate")?;
                let (key_path, key_pem) = read(key, "client key")?;
                if let Err(error) = crate::certificate::check(&cert_pem, &key_pem, None, now) {
                    let field = match error.culprit(None) {
                        Culprit::Key => key,
                        _ => cert,
                    };
                    self.problem(
                        field.span(),
                        format!("client certificate {}: {error}", cert_path.display()),
                    );
                    return None;
                }
                Some(ClientIdentity {
                    cert: cert_path,
                    key: key_path,
                    cert_pem,
                    key_pem,
                })
            }
            (Some(one), None) | (None, Some(one)) => {
                self.problem(
                    one.span(),
                    "`client_cert` and `client_key` go together: a certificate chain and its key",
                );
                return None;
            }
        };
        Some(UpstreamTls {
            ca,
            server_name,
            client,
        })
    }

    pub(super) fn host(&mut self, raw: &Spanned<String>) -> Option<HostMatch> {
        let host = raw.get_ref().to_ascii_lowercase();
        let (suffix, name) = match host.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, host.as_str()),
        };
        if !is_dns_name(name) {
            self.problem(
                raw.span(),
                format!(
                    "host {:?} must be a DNS name such as \"api.example.com\" or \"*.example.com\", without scheme or port",
                    raw.get_ref()
                ),
            );
            return None;
        }
        Some(if suffix {
            HostMatch::Suffix(format!(".{name}"))
        } else {
            HostMatch::Exact(name.to_string())
        })
    }

    pub(super) fn path_prefix(&mut self, raw: &Spanned<String>) -> String {
        let p = raw.get_ref();
        if !p.starts_with('/') || p.contains(['?', '#']) || p.contains(char::is_whitespace) {
            self.problem(
                raw.span(),
                format!("path_prefix {p:?} must start with '/' and hold no '?', '#' or spaces"),
            );
        }
        p.clone()
    }

    pub(super) fn upstream(
        &mut self,
        raw: &RawRoute,
        runtime: &RuntimeSettings,
    ) -> Option<UpstreamConfig> {
        let given = [
            raw.upstream.is_some(),
            raw.replicas.is_some(),
            raw.service.is_some(),
        ];
        if given.iter().filter(|g| **g).count() > 1 {
            self.problem(
                raw.name.span(),
                format!(
                    "route {:?} has more than one of `upstream`, `replicas` and `service`; it takes one",
                    raw.name.get_ref()
                ),
            );
            return None;
        }
        if let (Some(port), None) = (&raw.port, &raw.service) {
            self.problem(port.span(), "`port` goes with `service`");
            return None;
        }
        if let Some(url) = &raw.upstream {
            return self.external(url).map(UpstreamConfig::External);
        }
        if let Some(list) = &raw.replicas {
            return self.replicas(list).map(UpstreamConfig::Replicas);
        }
        let Some(service) = &raw.service else {
            self.problem(
                raw.name.span(),
                format!(
                    "route {:?} needs an upstream: `service = \"api\"` with a `port`, `upstream = \"http://host:port\"` or `replicas = [\"10.0.0.7:8080\"]`",
                    raw.name.get_ref()
                ),
            );
            return None;
        };
        let name = service.get_ref();
        let container = name.strip_prefix("container:");
        let (namespace, bare) = match (container, name.split_once('/')) {
            (Some(container), _) => (None, container),
            (None, Some((namespace, bare))) => (Some(namespace), bare),
            (None, None) => (None, name.as_str()),
        };
        if !is_name(bare) {
            self.problem(
                service.span(),
                format!("service {name:?} must be 1 to 63 letters, digits, '.', '_' or '-', after an optional \"namespace/\" (Kubernetes) or \"project/\" (compose)"),
            );
            return None;
        }
        let docker = matches!(runtime.kind, RuntimeKind::Docker | RuntimeKind::Swarm);
        if container.is_some() && !docker {
            self.problem(
                service.span(),
                format!("service {name:?} names a container: only runtime kinds \"docker\" and \"swarm\" have containers"),
            );
            return None;
        }
        match namespace {
            // A compose project: lowercase letters, digits, '-' and '_'.
            Some(project) if docker => {
                let valid = project
                    .bytes()
                    .next()
                    .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
                    && project.bytes().all(|b| {
                        b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'_')
                    });
                if !valid {
                    self.problem(
                        service.span(),
                        format!("service {name:?}: {project:?} is not a compose project name (lowercase letters, digits, '-' and '_')"),
                    );
                    return None;
                }
            }
            Some(namespace) => {
                let watched = runtime
                    .namespaces
                    .iter()
                    .any(|n| n == "*" || n == namespace)
                    || runtime.namespace.as_deref() == Some(namespace);
                if runtime.kind != RuntimeKind::Kubernetes {
                    self.problem(
                        service.span(),
                        format!("service {name:?} names a namespace: only runtime kind \"kubernetes\" has namespaces"),
                    );
                    return None;
                }
                if !is_dns_label(namespace) || !watched {
                    self.problem(
                        service.span(),
                        format!(
                            "service {name:?} is in namespace {namespace:?}, which this node does not watch: add it to `[runtime] namespaces`"
                        ),
                    );
                    return None;
                }
            }
            None => {}
        }
        if runtime.kind == RuntimeKind::None {
            self.problem(
                service.span(),
                format!(
                    "service {name:?} needs a runtime: set `[runtime] kind` to \"kubernetes\", \"docker\" or \"swarm\""
                ),
            );
            return None;
        }
        let Some(port) = &raw.port else {
            self.problem(service.span(), format!("service {name:?} needs a `port`"));
            return None;
        };
        let port = match port.get_ref() {
            RawPort::Number(n) => match u16::try_from(*n) {
                Ok(n) if PORT_RANGE.contains(&i64::from(n)) => ServicePort::Number(n),
                _ => {
                    self.problem(port.span(), out_of_range("port", n, &PORT_RANGE));
                    return None;
                }
            },
            RawPort::Name(named) if runtime.kind == RuntimeKind::Kubernetes => {
                if named.is_empty() || named.len() > 15 {
                    self.problem(
                        port.span(),
                        format!("port name {named:?} must be 1 to 15 characters"),
                    );
                    return None;
                }
                ServicePort::Name(named.clone())
            }
            RawPort::Name(named) => {
                self.problem(
                    port.span(),
                    format!("port {named:?}: ports by name are for Kubernetes; give a number"),
                );
                return None;
            }
        };
        Some(UpstreamConfig::Service {
            name: name.clone(),
            port,
        })
    }

    pub(super) fn replicas(
        &mut self,
        list: &Spanned<Vec<Spanned<String>>>,
    ) -> Option<Vec<SocketAddr>> {
        if list.get_ref().is_empty() {
            self.problem(list.span(), "replicas must name at least one address");
            return None;
        }
        let mut out = Vec::with_capacity(list.get_ref().len());
        for entry in list.get_ref() {
            match entry.get_ref().parse::<SocketAddr>() {
                Ok(addr) if out.contains(&addr) => {
                    self.problem(entry.span(), format!("replica {addr} is listed twice"));
                }
                Ok(addr) => out.push(addr),
                Err(_) => self.problem(
                    entry.span(),
                    format!(
                        "replica {:?} is not an IP:port such as \"10.0.0.7:8080\" (use `upstream = \"http://name:port\"` for a name)",
                        entry.get_ref()
                    ),
                ),
            }
        }
        (out.len() == list.get_ref().len()).then_some(out)
    }

    pub(super) fn external(&mut self, raw: &Spanned<String>) -> Option<ExternalHost> {
        let text = raw.get_ref();
        let bad = |why: &str| {
            format!(
                "upstream {text:?} {why}; expected a URL such as \"https://billing.example.net\""
            )
        };
        let Ok(uri) = text.parse::<http::Uri>() else {
            self.problem(raw.span(), bad("is not a URL"));
            return None;
        };
        let tls = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => {
                self.problem(raw.span(), bad("must start with http:// or https://"));
                return None;
            }
        };
        let Some(authority) = uri.authority() else {
            self.problem(raw.span(), bad("has no host"));
            return None;
        };
        if authority.as_str().contains('@') {
            self.problem(raw.span(), bad("must not carry credentials"));
            return None;
        }
        if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
            self.problem(raw.span(), bad("must not have a path or query"));
            return None;
        }
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']');
        if tls && rustls::pki_types::ServerName::try_from(host).is_err() {
            self.problem(raw.span(), bad("has a host TLS cannot verify"));
            return None;
        }
        Some(ExternalHost {
            tls,
            host: host.to_ascii_lowercase(),
            port: authority.port_u16().unwrap_or(if tls { 443 } else { 80 }),
        })
    }

    /// Route names are unique, and no two routes have the same match.
    pub(super) fn unique(&mut self, routes: &[Spanned<RawRoute>]) {
        let mut names: HashMap<&str, usize> = HashMap::new();
        let mut matches: HashMap<(String, &str), (&str, usize)> = HashMap::new();
        for route in routes {
            let raw = route.get_ref();
            let line = self.positions.problem(route.span(), "").line;
            let name = raw.name.get_ref().as_str();
            // A route given twice is one problem, not one per clash.
            let named_twice = names.insert(name, line);
            if let Some(first) = named_twice {
                self.problem(
                    raw.name.span(),
                    format!("route name {name:?} is already used by the route at line {first}"),
                );
            }
            let host = raw
                .host
                .as_ref()
                .map(|h| h.get_ref().to_ascii_lowercase())
                .unwrap_or_default();
            let prefix = raw
                .path_prefix
                .as_ref()
                .map_or("/", |p| p.get_ref().as_str());
            if let Some((other, first)) = matches.insert((host, prefix), (name, line))
                && named_twice.is_none()
            {
                self.problem(
                    raw.name.span(),
                    format!(
                        "route {name:?} has the same host and path_prefix as route {other:?} at line {first}"
                    ),
                );
            }
        }
    }

    /// A `max_body`: a size, or `"off"` for no limit.
    pub(super) fn max_body(
        &mut self,
        raw: Option<&Spanned<RawSize>>,
        inherited: &Setting<Option<u64>>,
        from: Origin,
    ) -> Setting<Option<u64>> {
        let Some(raw) = raw else {
            return inherited.clone();
        };
        let value = match raw.get_ref() {
            RawSize::Text(text) if text == "off" => return Setting::new(None, from),
            RawSize::Bytes(n) => u64::try_from(*n).ok(),
            RawSize::Text(text) => parse_size(text),
        };
        match value {
            Some(n) if MAX_BODY_RANGE.contains(&n) => Setting::new(Some(n), from),
            _ => {
                self.problem(
                    raw.span(),
                    "max_body is a size from 1 byte to 1TiB, such as 1048576, \"512k\" or \"10MiB\" (or \"off\")",
                );
                inherited.clone()
            }
        }
    }

    /// `request_headers` or `response_headers`: valid names and values,
    /// none the node writes itself.
    pub(super) fn header_rules(
        &mut self,
        raw: Option<&Spanned<RawHeaderRules>>,
        field: &str,
    ) -> HeaderRules {
        let mut rules = HeaderRules::default();
        let Some(raw) = raw else {
            return rules;
        };
        let name = |v: &mut Self, raw: &Spanned<String>| {
            let Ok(name) = http::header::HeaderName::from_bytes(raw.get_ref().as_bytes()) else {
                v.problem(
                    raw.span(),
                    format!("{field}: {:?} is not a header name", raw.get_ref()),
                );
                return None;
            };
            if HeaderRules::is_reserved(&name) {
                v.problem(
                    raw.span(),
                    format!(
                        "{field}: {name} is written by the node itself (framing, hop-by-hop, forwarding or the request ID): no rule may set, remove or admit it"
                    ),
                );
                return None;
            }
            Some(name)
        };
        if let Some(set) = &raw.get_ref().set {
            for (key, value) in set.get_ref() {
                let Some(name) = name(self, key) else {
                    continue;
                };
                match http::header::HeaderValue::from_str(value.get_ref()) {
                    Ok(value) => rules.set.push((name, value)),
                    Err(_) => self.problem(
                        value.span(),
                        format!("{field}: the value of {name} holds a character a header cannot carry: control characters and non-ASCII"),
                    ),
                }
            }
        }
        if let Some(remove) = &raw.get_ref().remove {
            for key in remove.get_ref() {
                if let Some(name) = name(self, key) {
                    if rules.set.iter().any(|(n, _)| *n == name) {
                        self.problem(
                            key.span(),
                            format!("{field}: {name} is both set and removed"),
                        );
                    }
                    rules.remove.push(name);
                }
            }
        }
        if let Some(trailers) = &raw.get_ref().trailers {
            for key in trailers.get_ref() {
                let Some(name) = name(self, key) else {
                    continue;
                };
                if crate::config::forwarding::is_forwarding(name.as_str().as_bytes()) {
                    self.problem(
                        key.span(),
                        format!(
                            "{field}: {name} says who the client is; it never crosses in a trailer"
                        ),
                    );
                } else if !rules.trailers.contains(&name) {
                    rules.trailers.push(name);
                }
            }
        }
        rules
    }

    pub(super) fn rate(&mut self, raw: &Spanned<RawRate>) -> Option<RateSettings> {
        let before = self.problems.len();
        let rate = raw.get_ref();
        let per_second = match &rate.per_second {
            Some(p) if p.get_ref().is_finite() && *p.get_ref() > 0.0 && *p.get_ref() <= 1e6 => {
                *p.get_ref()
            }
            Some(p) => {
                self.problem(
                    p.span(),
                    format!(
                        "rate.per_second = {} is out of range: above 0, at most 1000000",
                        p.get_ref()
                    ),
                );
                1.0
            }
            None => {
                self.problem(
                    raw.span(),
                    "rate needs per_second: the requests a second it refills",
                );
                1.0
            }
        };
        let burst = match &rate.burst {
            Some(b) if RATE_BURST_RANGE.contains(b.get_ref()) => {
                u32::try_from(*b.get_ref()).unwrap_or(1)
            }
            Some(b) => {
                self.problem(
                    b.span(),
                    out_of_range("rate.burst", b.get_ref(), &RATE_BURST_RANGE),
                );
                1
            }
            // A second's worth.
            None => (per_second.ceil() as u32).max(1),
        };
        let by = match rate.by.as_ref().map(|b| (b, b.get_ref().as_str())) {
            None | Some((_, "route")) => RateKey::Route,
            Some((_, "client")) => RateKey::Client,
            Some((b, other)) => {
                self.problem(
                    b.span(),
                    format!("rate.by = {other:?}: it is \"route\" or \"client\""),
                );
                RateKey::Route
            }
        };
        (self.problems.len() == before).then_some(RateSettings {
            per_second,
            burst,
            by,
        })
    }

    /// `add_prefix`: a normal path, without a trailing `/`.
    pub(super) fn add_prefix(&mut self, raw: &Spanned<String>) -> String {
        let p = raw.get_ref();
        let normal =
            crate::h1::target::normalize(p.as_bytes()).is_ok_and(|n| n.as_ref() == p.as_bytes());
        if !normal || p.len() < 2 || p.ends_with('/') || p.contains(['?', '#', '%']) {
            self.problem(
                raw.span(),
                format!(
                    "add_prefix {p:?} must be a path such as \"/v2\": starting with '/', not ending with it, without '.' or '..' segments, '?', '#' or '%'"
                ),
            );
        }
        p.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{ROUTE, problems, valid};

    fn route(lines: &str) -> String {
        format!("[[route]]\nname = \"r\"\nreplicas = [\"127.0.0.1:9000\"]\n{lines}")
    }

    #[test]
    fn a_route_as_written() {
        let config = valid(&route(
            "host = \"shop.example.com\"\npath_prefix = \"/api\"\ntries = 2\nmax_body = \"1m\"\n",
        ));
        let r = &config.routes[0];
        assert_eq!(r.path_prefix, "/api");
        assert_eq!(r.tries.value, 2);
    }

    #[test]
    fn every_problem_of_a_route_with_its_place() {
        let found = problems(&route(
            "tries = 99\npath_prefix = \"api\"\nmax_body = \"lots\"\n",
        ));
        assert_eq!(found.len(), 3, "{found:?}");
        assert_eq!(found[0], "4:9: tries = 99 is out of range: 1 to 10");
        assert!(found[1].starts_with("5:15: "), "{found:?}");
        assert!(found[2].starts_with("6:12: "), "{found:?}");
    }

    #[test]
    fn two_routes_of_one_name_are_refused() {
        let found = problems(&format!("{ROUTE}{ROUTE}"));
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("api"), "{found:?}");
    }

    #[test]
    fn a_route_needs_somewhere_to_send() {
        let found = problems("[[route]]\nname = \"r\"\n");
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with("1:1: ") || found[0].starts_with("2:"),
            "{found:?}"
        );
    }

    #[test]
    fn an_http_check_reads_its_settings_and_refuses_strays() {
        use crate::config::{CheckKind, HttpCheck, StatusSet};
        let config = valid(&route(
            "check = \"http\"\ncheck_path = \"/healthz?full=1\"\ncheck_host = \"App.Internal:8080\"\ncheck_statuses = [\"2xx\", 401, \"500-502\"]\ncheck_every = \"5s\"\ncheck_timeout = \"1s\"",
        ));
        let r = &config.routes[0];
        assert_eq!(
            r.check,
            CheckKind::Http(HttpCheck {
                path: "/healthz?full=1".into(),
                host: Some("app.internal:8080".into()),
                statuses: StatusSet(vec![(200, 299), (401, 401), (500, 502)]),
            })
        );
        assert_eq!(r.check_every, Some(std::time::Duration::from_secs(5)));
        assert_eq!(r.check_timeout, Some(std::time::Duration::from_secs(1)));
        // The defaults: `/`, the replica's authority, 2xx and 3xx, the
        // node's period and bound.
        let plain = valid(&route("check = \"http\""));
        assert_eq!(
            plain.routes[0].check,
            CheckKind::Http(HttpCheck {
                path: "/".into(),
                host: None,
                statuses: StatusSet::default_pass(),
            })
        );
        assert_eq!(plain.routes[0].check_every, None);
        // One status, or a label's text with commas.
        for (statuses, set) in [
            ("204", vec![(204, 204)]),
            ("\"2xx, 401\"", vec![(200, 299), (401, 401)]),
        ] {
            let config = valid(&route(&format!(
                "check = \"http\"\ncheck_statuses = {statuses}"
            )));
            let CheckKind::Http(http) = &config.routes[0].check else {
                panic!("an HTTP check");
            };
            assert_eq!(http.statuses, StatusSet(set));
        }
        let cases = [
            (
                "check = \"tcp\"",
                "4:9: check \"tcp\" is not one of \"connect\", \"grpc\", \"http\"",
            ),
            (
                "check_path = \"/h\"",
                "4:14: check_path belongs to an HTTP health check: set `check = \"http\"` too",
            ),
            (
                "check = \"grpc\"\nprotocol = \"h2c\"\ncheck_statuses = [\"2xx\"]",
                "6:18: check_statuses belongs to an HTTP health check: set `check = \"http\"` too",
            ),
            (
                "check = \"http\"\ngrpc_service = \"a.B\"",
                "5:16: grpc_service is the service a gRPC health check asks for: set `check = \"grpc\"` too",
            ),
            (
                "check = \"http\"\ncheck_path = \"healthz\"",
                "5:14: check_path \"healthz\" must start with '/' and hold at most 1024 visible ASCII characters, no spaces or '#'",
            ),
            (
                "check = \"http\"\ncheck_path = \"/a b\"",
                "5:14: check_path \"/a b\" must start with '/' and hold at most 1024 visible ASCII characters, no spaces or '#'",
            ),
            (
                "check = \"http\"\ncheck_host = \"a.test\\r\\nx-evil: 1\"",
                "5:14: check_host \"a.test\\r\\nx-evil: 1\" is not a host name or address (with an optional :port)",
            ),
            (
                "check = \"http\"\ncheck_host = \"a.test:0\"",
                "5:14: check_host \"a.test:0\" is not a host name or address (with an optional :port)",
            ),
            (
                "check = \"http\"\ncheck_statuses = [\"2xx\", \"6xx\"]",
                "5:18: check_statuses entry \"6xx\" is not a status (100 to 599), a class such as \"2xx\" or a range such as \"200-204\"",
            ),
            (
                "check = \"http\"\ncheck_statuses = []",
                "5:18: check_statuses is empty: no answer could pass",
            ),
            (
                "check = \"http\"\ncheck_every = \"100ms\"",
                "5:15: check_every",
            ),
        ];
        for (lines, said) in cases {
            let found = problems(&route(lines));
            assert!(
                found.iter().any(|p| p.starts_with(said)),
                "{lines}: {found:?}"
            );
        }
        // IPv6 and IPv4 hosts, with and without a port.
        for host in [
            "[::1]:8080",
            "[::1]",
            "10.0.0.7",
            "10.0.0.7:80",
            "svc.ns.svc",
        ] {
            assert!(
                problems(&route(&format!(
                    "check = \"http\"\ncheck_host = \"{host}\""
                )))
                .is_empty(),
                "{host}"
            );
        }
    }
}
