//! `[cluster]`: gossip, its peers and its key.

use super::*;

impl Validator<'_> {
    pub(super) fn cluster(&mut self, spanned: &Spanned<RawCluster>) -> ClusterSettings {
        let raw = spanned.get_ref();
        let id = match &raw.id {
            Some(id) if is_name(id.get_ref()) => id.get_ref().clone(),
            Some(id) => {
                self.problem(
                    id.span(),
                    format!(
                        "cluster id {:?} must be 1 to 63 letters, digits, '.', '_' or '-'",
                        id.get_ref()
                    ),
                );
                String::new()
            }
            None => {
                self.problem(
                    spanned.span(),
                    "[cluster] needs an `id`, the same on every node of the cluster",
                );
                String::new()
            }
        };
        let gossip = self
            .address(raw.gossip.as_ref(), "gossip", DEFAULT_GOSSIP)
            .value;
        let advertise = raw.advertise.as_ref().map(|a| {
            let addr = self.address(Some(a), "advertise", "10.0.0.5:7946").value;
            if addr.ip().is_unspecified() || addr.port() == 0 {
                self.problem(
                    a.span(),
                    format!(
                        "advertise = {:?} must be an address peers can reach",
                        a.get_ref()
                    ),
                );
            }
            addr
        });
        let mut seeds = Vec::new();
        for seed in raw.seeds.iter().flatten() {
            let valid = seed
                .get_ref()
                .rsplit_once(':')
                .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
            if valid {
                seeds.push(seed.get_ref().clone());
            } else {
                self.problem(
                    seed.span(),
                    format!(
                        "seed {:?} is not a host:port such as \"tasks.picket:7946\"",
                        seed.get_ref()
                    ),
                );
            }
        }
        let insecure = raw.insecure.as_ref().is_some_and(|i| *i.get_ref());
        let key_file = raw.key_file.as_ref().map(|k| PathBuf::from(k.get_ref()));
        if let (Some(key), true) = (&raw.key_file, insecure) {
            self.problem(
                key.span(),
                "`key_file` and `insecure = true` contradict each other: gossip is either sealed or insecure",
            );
        }
        let gossip_interval = match &raw.gossip_interval {
            Some(i) => self
                .duration(i, "gossip_interval", GOSSIP_INTERVAL_RANGE)
                .unwrap_or(DEFAULT_GOSSIP_INTERVAL),
            None => DEFAULT_GOSSIP_INTERVAL,
        };
        ClusterSettings {
            id,
            gossip,
            advertise,
            seeds,
            key_file,
            insecure,
            gossip_interval,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{ROUTE, problems, valid};

    #[test]
    fn the_section_as_written() {
        let text = format!(
            "[cluster]\nid = \"prod\"\ngossip = \"0.0.0.0:7946\"\nseeds = [\"10.0.0.2:7946\"]\nkey_file = \"keys\"\ngossip_interval = \"2s\"\n{ROUTE}"
        );
        let cluster = valid(&text).cluster.expect("a cluster");
        assert_eq!(cluster.id, "prod");
        assert_eq!(cluster.seeds.len(), 1);
        assert_eq!(cluster.gossip_interval.as_secs(), 2);
    }

    #[test]
    fn every_problem_of_the_section_with_its_place() {
        let text = format!(
            "[cluster]\nid = \"prod\"\nseeds = [\"nowhere\"]\ngossip_interval = \"1ms\"\n{ROUTE}"
        );
        let found = problems(&text);
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].starts_with("3:10: "), "{found:?}");
        assert!(found[1].starts_with("4:19: gossip_interval"), "{found:?}");
    }
}
