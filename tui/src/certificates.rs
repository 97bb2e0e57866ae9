//! Each node's state of each certificate the cluster obtains from ACME,
//! side by side: a row per certificate, a cell per member. Pure: read from
//! a view, shown by the status line, the certificates overlay (`c`) and
//! `--once`.
//!
//! A certificate's live members disagree when they serve different
//! serials (a renewal on its way through the cluster, or a node that
//! cannot get it); it is failing when a live member's last order failed.

use picket_proto::{AcmePhase, CertificateState, ClusterView, Liveness};

/// One certificate across the members.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row<'v> {
    pub name: &'v str,
    /// Each member's state, in the view's order; `None`: it has said
    /// nothing of this certificate.
    pub cells: Vec<Option<&'v CertificateState>>,
    /// Live members that serve different serials.
    pub disagree: bool,
    /// Live members whose last order failed.
    pub failing: Vec<&'v str>,
}

/// The certificates any member manages, by name.
pub fn rows(view: &ClusterView) -> Vec<Row<'_>> {
    let mut names: Vec<&str> = view
        .members
        .iter()
        .flat_map(|m| m.certificates.iter().map(|c| c.name.as_str()))
        .collect();
    names.sort_unstable();
    names.dedup();
    names
        .into_iter()
        .map(|name| {
            let cells: Vec<Option<&CertificateState>> = view
                .members
                .iter()
                .map(|m| m.certificates.iter().find(|c| c.name == name))
                .collect();
            let live = || {
                view.members
                    .iter()
                    .zip(&cells)
                    .filter(|(m, _)| m.liveness != Liveness::Dead)
                    .filter_map(|(m, c)| Some((m.name.as_str(), (*c)?)))
            };
            let mut serials: Vec<&str> = live().filter_map(|(_, c)| c.serial.as_deref()).collect();
            serials.sort_unstable();
            serials.dedup();
            Row {
                name,
                disagree: serials.len() > 1,
                failing: live()
                    .filter(|(_, c)| c.phase == AcmePhase::Failing)
                    .map(|(node, _)| node)
                    .collect(),
                cells,
            }
        })
        .collect()
}

/// A cell's text: the phase and the first 8 hex digits of the serial
/// served (`serving fa4e6f5a`), or `·`.
pub fn cell(state: Option<&CertificateState>) -> String {
    match state {
        None => crate::theme::NO_VERDICT.to_string(),
        Some(state) => match &state.serial {
            Some(serial) => format!(
                "{} {}",
                state.phase.as_str(),
                serial.get(..8).unwrap_or(serial)
            ),
            None => state.phase.as_str().to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::fixture::{certificate, three_nodes};

    fn state(phase: AcmePhase, serial: Option<&str>) -> CertificateState {
        let error = (phase == AcmePhase::Failing).then_some("the CA said no");
        certificate(phase, serial, error)
    }

    #[test]
    fn live_members_that_serve_different_serials_disagree_and_failures_are_named() {
        let mut view = three_nodes();
        view.members[0].certificates = vec![state(AcmePhase::Renewing, Some("fa4e6f5a3c6d1b02"))];
        view.members[1].certificates = vec![state(AcmePhase::Serving, Some("fa4e6f5a3c6d1b02"))];
        let rows = rows(&view);
        assert_eq!(rows.len(), 1);
        assert!(!rows[0].disagree && rows[0].failing.is_empty());
        assert_eq!(cell(rows[0].cells[0]), "renewing fa4e6f5a");
        assert_eq!(cell(rows[0].cells[2]), "·");
        view.members[2].certificates = vec![state(AcmePhase::Failing, Some("0b1c"))];
        let rows = super::rows(&view);
        assert!(rows[0].disagree, "two serials among live members");
        assert_eq!(rows[0].failing, ["n3"]);
        assert_eq!(cell(rows[0].cells[2]), "failing 0b1c");
    }
}
