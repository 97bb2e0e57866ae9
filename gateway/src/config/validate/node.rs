//! `[node]`: the listeners, limits, access log and feed of this node.

use super::*;

impl Validator<'_> {
    pub(super) fn node(&mut self, raw: &RawNode, dir: &Path) -> NodeSettings {
        let name = match &raw.name {
            Some(name) => {
                if !is_name(name.get_ref()) {
                    self.problem(
                        name.span(),
                        format!(
                            "node name {:?} must be 1 to 63 letters, digits, '.', '_' or '-'",
                            name.get_ref()
                        ),
                    );
                }
                Setting::new(name.get_ref().clone(), Origin::File)
            }
            None => Setting::new(default_node_name(), Origin::Default),
        };
        let listen = self.address(raw.listen.as_ref(), "listen", DEFAULT_LISTEN);
        let listen_tls = raw
            .listen_tls
            .as_ref()
            .map(|l| self.address(Some(l), "listen_tls", "0.0.0.0:8443"));
        let tls_groups = match &raw.tls_groups {
            None => Setting::new(None, Origin::Default),
            Some(list) => {
                let mut groups = Vec::new();
                for name in list.get_ref() {
                    match super::super::TLS_GROUPS
                        .iter()
                        .find(|g| g.eq_ignore_ascii_case(name.get_ref()))
                    {
                        Some(known) if groups.contains(&known.to_string()) => {
                            self.problem(name.span(), format!("tls_groups names {known} twice"))
                        }
                        Some(known) => groups.push(known.to_string()),
                        None => self.problem(
                            name.span(),
                            format!(
                                "tls_groups: unknown group {:?}; known: {}",
                                name.get_ref(),
                                super::super::TLS_GROUPS.join(", ")
                            ),
                        ),
                    }
                }
                if list.get_ref().is_empty() {
                    self.problem(list.span(), "tls_groups is empty: name at least one group");
                }
                Setting::new(Some(groups), Origin::File)
            }
        };
        let admin = self.address(raw.admin.as_ref(), "admin", DEFAULT_ADMIN);
        let workers = match &raw.workers {
            Some(w) => {
                let n = *w.get_ref();
                if !WORKERS_RANGE.contains(&n) {
                    self.problem(w.span(), out_of_range("workers", n, &WORKERS_RANGE));
                }
                Setting::new(usize::try_from(n).unwrap_or(1).max(1), Origin::File)
            }
            None => Setting::new(default_workers(), Origin::Default),
        };
        let max_connections = match &raw.max_connections {
            Some(m) => {
                let n = *m.get_ref();
                if !MAX_CONNECTIONS_RANGE.contains(&n) {
                    self.problem(
                        m.span(),
                        out_of_range("max_connections", n, &MAX_CONNECTIONS_RANGE),
                    );
                }
                Setting::new(usize::try_from(n).ok(), Origin::File)
            }
            None => Setting::new(None, Origin::Default),
        };
        let admin_max_connections = match &raw.admin_max_connections {
            Some(m) => {
                let n = *m.get_ref();
                if !ADMIN_MAX_CONNECTIONS_RANGE.contains(&n) {
                    self.problem(
                        m.span(),
                        out_of_range("admin_max_connections", n, &ADMIN_MAX_CONNECTIONS_RANGE),
                    );
                }
                Setting::new(
                    usize::try_from(n).unwrap_or(1).clamp(1, 65_536),
                    Origin::File,
                )
            }
            None => Setting::new(super::super::ADMIN_MAX_CONNECTIONS, Origin::Default),
        };
        let mut timeout = |raw: &Option<Spanned<String>>, field, range, default| match raw {
            Some(value) => Setting::new(
                self.duration(value, field, range).unwrap_or(default),
                Origin::File,
            ),
            None => Setting::new(default, Origin::Default),
        };
        let header_timeout = timeout(
            &raw.header_timeout,
            "header_timeout",
            HEADER_TIMEOUT_RANGE,
            super::super::HEADER_READ_TIMEOUT,
        );
        let idle_timeout = timeout(
            &raw.idle_timeout,
            "idle_timeout",
            IDLE_TIMEOUT_RANGE,
            super::super::IDLE_TIMEOUT,
        );
        let send_timeout = timeout(
            &raw.send_timeout,
            "send_timeout",
            IDLE_TIMEOUT_RANGE,
            super::super::SEND_TIMEOUT,
        );
        let feed = raw.feed.as_ref().map(|feed| FeedSettings {
            addr: self.address(Some(feed), "feed", "0.0.0.0:9901").value,
            cert: None,
            client_ca: None,
        });
        let client_ca = raw
            .feed_client_ca
            .as_ref()
            .map(|ca| PathBuf::from(ca.get_ref()));
        let cert = match (&raw.feed_cert, &raw.feed_key) {
            (Some(cert), Some(key)) => {
                Some((PathBuf::from(cert.get_ref()), PathBuf::from(key.get_ref())))
            }
            (None, None) => None,
            (Some(one), None) | (None, Some(one)) => {
                self.problem(
                    one.span(),
                    "`feed_cert` and `feed_key` go together: a certificate chain and its key",
                );
                None
            }
        };
        let feed = match (feed, cert) {
            (Some(feed), cert) => Some(FeedSettings {
                cert,
                client_ca,
                ..feed
            }),
            (None, cert) => {
                if let Some(ca) = raw.feed_client_ca.as_ref().filter(|_| cert.is_none()) {
                    self.problem(
                        ca.span(),
                        "`feed_client_ca` without `feed`: set the feed's address too",
                    );
                }
                if let Some(cert) = &raw.feed_cert {
                    self.problem(
                        cert.span(),
                        "`feed_cert` without `feed`: set the feed's address too",
                    );
                }
                None
            }
        };
        NodeSettings {
            name,
            listen,
            listen_tls,
            tls_groups,
            admin,
            workers,
            max_connections,
            header_timeout,
            idle_timeout,
            send_timeout,
            admin_max_connections,
            feed,
            access_log: self.access_log(raw.access_log.as_ref(), dir),
            access_log_format: self.access_log_format(raw.access_log_format.as_ref()),
        }
    }

    /// `access_log`: `"stdout"`, `"off"`, or a file (relative to the
    /// configuration's directory) in a directory that exists.
    pub(super) fn access_log(
        &mut self,
        raw: Option<&Spanned<String>>,
        dir: &Path,
    ) -> Setting<AccessLogTarget> {
        let Some(raw) = raw else {
            return Setting::new(AccessLogTarget::Stdout, Origin::Default);
        };
        let target = match raw.get_ref().as_str() {
            "stdout" => AccessLogTarget::Stdout,
            "off" => AccessLogTarget::Off,
            "" => {
                self.problem(
                    raw.span(),
                    "access_log is \"stdout\", \"off\" or a file's path",
                );
                AccessLogTarget::Off
            }
            path => {
                let path = dir.join(path);
                let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
                if parent.is_some_and(|p| !p.is_dir()) {
                    self.problem(
                        raw.span(),
                        format!(
                            "access_log = {:?}: its directory does not exist",
                            raw.get_ref()
                        ),
                    );
                }
                AccessLogTarget::File(path)
            }
        };
        Setting::new(target, Origin::File)
    }

    pub(super) fn access_log_format(
        &mut self,
        raw: Option<&Spanned<String>>,
    ) -> Setting<AccessLogFormat> {
        let Some(raw) = raw else {
            return Setting::new(AccessLogFormat::Json, Origin::Default);
        };
        let format = match raw.get_ref().as_str() {
            "json" => AccessLogFormat::Json,
            "combined" => AccessLogFormat::Combined,
            other => {
                self.problem(
                    raw.span(),
                    format!("access_log_format = {other:?}: it is \"json\" or \"combined\""),
                );
                AccessLogFormat::Json
            }
        };
        Setting::new(format, Origin::File)
    }

    pub(super) fn address(
        &mut self,
        raw: Option<&Spanned<String>>,
        field: &str,
        default: &str,
    ) -> Setting<SocketAddr> {
        let fallback = default
            .parse()
            .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 0)));
        let Some(raw) = raw else {
            return Setting::new(fallback, Origin::Default);
        };
        match raw.get_ref().parse() {
            Ok(addr) => Setting::new(addr, Origin::File),
            Err(_) => {
                self.problem(
                    raw.span(),
                    format!(
                        "{field} = {:?} is not an address such as \"{default}\"",
                        raw.get_ref()
                    ),
                );
                Setting::new(fallback, Origin::File)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{ROUTE, problems, valid};
    use super::*;

    #[test]
    fn defaults_and_values() {
        let config = valid(ROUTE);
        assert_eq!(config.node.listen.value.to_string(), DEFAULT_LISTEN);
        assert_eq!(config.node.admin.value.to_string(), DEFAULT_ADMIN);
        assert_eq!(config.node.workers.from, Origin::Default);
        let config = valid(&format!("[node]\nname = \"edge-1\"\nworkers = 3\n{ROUTE}"));
        assert_eq!(config.node.name.value, "edge-1");
        assert_eq!(
            (config.node.workers.value, config.node.workers.from),
            (3, Origin::File)
        );
    }

    #[test]
    fn every_problem_of_the_section_with_its_place() {
        let text = format!(
            "[node]\nname = \"a b\"\nlisten = \"nowhere\"\nworkers = 0\nmax_connections = 0\naccess_log_format = \"xml\"\ntls_groups = []\n{ROUTE}"
        );
        assert_eq!(
            problems(&text),
            [
                "2:8: node name \"a b\" must be 1 to 63 letters, digits, '.', '_' or '-'",
                "3:10: listen = \"nowhere\" is not an address such as \"0.0.0.0:8080\"",
                "4:11: workers = 0 is out of range: 1 to 256",
                "5:19: max_connections = 0 is out of range: 1 to 1000000",
                "6:21: access_log_format = \"xml\": it is \"json\" or \"combined\"",
                "7:14: tls_groups is empty: name at least one group",
            ]
        );
    }

    #[test]
    fn tls_groups_are_known_once_each() {
        let text = format!("[node]\ntls_groups = [\"X25519\", \"x25519\", \"P-999\"]\n{ROUTE}");
        let found = problems(&text);
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(
            found[0].contains("tls_groups names X25519 twice"),
            "{found:?}"
        );
        assert!(found[1].contains("unknown group \"P-999\""), "{found:?}");
    }

    #[test]
    fn the_feed_needs_its_address() {
        let text = format!("[node]\nfeed_cert = \"c.pem\"\nfeed_key = \"k.pem\"\n{ROUTE}");
        let found = problems(&text);
        assert!(
            found
                .iter()
                .any(|p| p.contains("`feed_cert` without `feed`")),
            "{found:?}"
        );
        let text = format!("[node]\nfeed = \"127.0.0.1:9901\"\nfeed_cert = \"c.pem\"\n{ROUTE}");
        let found = problems(&text);
        assert!(found.iter().any(|p| p.contains("go together")), "{found:?}");
    }
}
