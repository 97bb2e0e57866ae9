//! `[global]`: what every route inherits unless it says otherwise, the breaker included.

use super::*;

impl Validator<'_> {
    pub(super) fn global(&mut self, raw: &RawGlobal) -> GlobalSettings {
        let defaults = BreakerSettings {
            enabled: Setting::new(false, Origin::Default),
            failures: Setting::new(DEFAULT_BREAKER_FAILURES, Origin::Default),
            cooldown: Setting::new(DEFAULT_BREAKER_COOLDOWN, Origin::Default),
        };
        let breaker = self.breaker(raw.breaker.as_ref(), &defaults, Origin::Global);
        let mut inherited = |raw: &Option<Spanned<String>>, field, range, default| match raw {
            Some(value) => Setting::new(
                self.duration(value, field, range).unwrap_or(default),
                Origin::Global,
            ),
            None => Setting::new(default, Origin::Default),
        };
        GlobalSettings {
            connect_timeout: inherited(
                &raw.connect_timeout,
                "connect_timeout",
                CONNECT_RANGE,
                DEFAULT_CONNECT_TIMEOUT,
            ),
            first_answer_timeout: inherited(
                &raw.first_answer_timeout,
                "first_answer_timeout",
                FIRST_ANSWER_RANGE,
                DEFAULT_FIRST_ANSWER_TIMEOUT,
            ),
            eject_for: inherited(&raw.eject_for, "eject_for", EJECT_RANGE, DEFAULT_EJECT_FOR),
            breaker,
            check_every: inherited(
                &raw.check_every,
                "check_every",
                CHECK_EVERY_RANGE,
                DEFAULT_CHECK_EVERY,
            ),
            check_timeout: inherited(
                &raw.check_timeout,
                "check_timeout",
                CHECK_TIMEOUT_RANGE,
                DEFAULT_CHECK_TIMEOUT,
            ),
            body_timeout: inherited(
                &raw.body_timeout,
                "body_timeout",
                BODY_TIMEOUT_RANGE,
                DEFAULT_BODY_TIMEOUT,
            ),
            consecutive_gateway_errors: self.gateway_errors(
                raw.consecutive_gateway_errors.as_ref(),
                &Setting::new(DEFAULT_CONSECUTIVE_GATEWAY_ERRORS, Origin::Default),
                Origin::Global,
            ),
            underscores_in_headers: match &raw.underscores_in_headers {
                Some(v) => Setting::new(*v.get_ref(), Origin::Global),
                None => Setting::new(false, Origin::Default),
            },
            trusted_proxies: self.trusted_proxies(raw.trusted_proxies.as_ref()),
            max_body: self.max_body(
                raw.max_body.as_ref(),
                &Setting::new(None, Origin::Default),
                Origin::Global,
            ),
            request_headers: self.header_rules(raw.request_headers.as_ref(), "request_headers"),
            response_headers: self.header_rules(raw.response_headers.as_ref(), "response_headers"),
        }
    }

    /// `trusted_proxies`: each entry a CIDR range or a single address; a
    /// bad one is a problem at its own line and column.
    pub(super) fn trusted_proxies(
        &mut self,
        raw: Option<&Spanned<Vec<Spanned<String>>>>,
    ) -> Setting<TrustedProxies> {
        let Some(list) = raw else {
            return Setting::new(TrustedProxies::default(), Origin::Default);
        };
        let mut ranges = Vec::with_capacity(list.get_ref().len());
        for entry in list.get_ref() {
            match Cidr::parse(entry.get_ref()) {
                Ok(range) => ranges.push(range),
                Err(error) => self.problem(entry.span(), format!("trusted_proxies: {error}")),
            }
        }
        Setting::new(TrustedProxies::new(ranges), Origin::Global)
    }

    /// Breaker settings: each field given, else `inherited`'s.
    pub(super) fn breaker(
        &mut self,
        raw: Option<&RawBreaker>,
        inherited: &BreakerSettings,
        from: Origin,
    ) -> BreakerSettings {
        let Some(raw) = raw else {
            return inherited.clone();
        };
        let enabled = match &raw.enabled {
            Some(e) => Setting::new(*e.get_ref(), from),
            None => inherited.enabled.clone(),
        };
        let failures = match &raw.failures {
            Some(f) if BREAKER_FAILURES_RANGE.contains(f.get_ref()) => Setting::new(
                u32::try_from(*f.get_ref()).unwrap_or(DEFAULT_BREAKER_FAILURES),
                from,
            ),
            Some(f) => {
                self.problem(
                    f.span(),
                    out_of_range("breaker failures", f.get_ref(), &BREAKER_FAILURES_RANGE),
                );
                inherited.failures.clone()
            }
            None => inherited.failures.clone(),
        };
        let cooldown = match &raw.cooldown {
            Some(c) => match self.duration(c, "breaker cooldown", BREAKER_COOLDOWN_RANGE) {
                Some(d) => Setting::new(d, from),
                None => inherited.cooldown.clone(),
            },
            None => inherited.cooldown.clone(),
        };
        BreakerSettings {
            enabled,
            failures,
            cooldown,
        }
    }

    /// The route's own value, else the inherited one.
    /// `consecutive_gateway_errors`: the value given, else `inherited`.
    pub(super) fn gateway_errors(
        &mut self,
        raw: Option<&Spanned<i64>>,
        inherited: &Setting<u32>,
        from: Origin,
    ) -> Setting<u32> {
        match raw {
            Some(n) if GATEWAY_ERRORS_RANGE.contains(n.get_ref()) => {
                Setting::new(u32::try_from(*n.get_ref()).unwrap_or(5), from)
            }
            Some(n) => {
                self.problem(
                    n.span(),
                    out_of_range(
                        "consecutive_gateway_errors",
                        n.get_ref(),
                        &GATEWAY_ERRORS_RANGE,
                    ),
                );
                inherited.clone()
            }
            None => inherited.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{ROUTE, problems, valid};

    #[test]
    fn routes_inherit_what_they_do_not_say() {
        let text = format!(
            "[global]\nconnect_timeout = \"3s\"\nfirst_answer_timeout = \"20s\"\n{ROUTE}\n[[route]]\nname = \"own\"\npath_prefix = \"/own\"\nreplicas = [\"127.0.0.1:9001\"]\nconnect_timeout = \"1s\"\n"
        );
        let config = valid(&text);
        let api = &config.routes[0];
        assert_eq!(api.connect_timeout.value.as_secs(), 3);
        assert_eq!(api.first_answer_timeout.value.as_secs(), 20);
        let own = &config.routes[1];
        assert_eq!(own.connect_timeout.value.as_secs(), 1);
        assert_eq!(own.first_answer_timeout.value.as_secs(), 20);
    }

    #[test]
    fn every_problem_of_the_section_with_its_place() {
        let text = format!(
            "[global]\nconnect_timeout = \"90s\"\nbreaker = {{ enabled = true, failures = 1 }}\nconsecutive_gateway_errors = 1\n{ROUTE}"
        );
        let found = problems(&text);
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(found[0].starts_with("2:19: connect_timeout"), "{found:?}");
        assert!(found[0].contains("1s to 30s"), "{found:?}");
        assert_eq!(
            found[1],
            "3:40: breaker failures = 1 is out of range: 2 to 100"
        );
        assert_eq!(
            found[2],
            "4:30: consecutive_gateway_errors = 1 is out of range: 2 to 100"
        );
    }
}
