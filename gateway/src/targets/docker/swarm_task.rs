//! Whether a container that says it is a Swarm task is one.
//!
//! A Swarm task's container carries labels that name its service and its
//! task, and any container can carry the same (`docker run --label`). The
//! swarm's managers know its tasks: a container that claims a task is
//! asked of them (`GET /tasks/{id}`, then `GET /services/{id}` for the
//! service's name, through the same read-only socket proxy). It is a
//! replica only if that task is its own (the manager names it as the
//! task's container) and of the service its label names. An engine that
//! is not a manager answers 503: the next engine the node follows is
//! asked. Where no manager answers, or the task has not reported its
//! container yet, the labels are taken as they are (docs/security.md
//! says so).

use bollard::models::Task;

/// What the swarm says of a container's claim to be a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vouch {
    /// The task is this container, of the service it names.
    Confirmed,
    /// The swarm has no such task, or the task is another container's,
    /// or another service's: not a replica.
    Denied,
    /// Nobody who knows answered: the labels stand.
    Unknown,
}

/// What a manager's answer about a task says of `container` (its full
/// ID) claiming to be a task of `service`; `service_name` is the name of
/// the task's service, when known.
pub fn judge(container: &str, service: &str, task: &Task, service_name: Option<&str>) -> Vouch {
    let reported = task
        .status
        .as_ref()
        .and_then(|s| s.container_status.as_ref())
        .and_then(|c| c.container_id.as_deref());
    match (reported, service_name) {
        (Some(id), _) if id != container => Vouch::Denied,
        (_, Some(name)) if name != service => Vouch::Denied,
        (Some(_), Some(_)) => Vouch::Confirmed,
        // The task has not reported its container yet, or its service's
        // name is not known: the labels stand.
        _ => Vouch::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(container: Option<&str>) -> Task {
        serde_json::from_value(serde_json::json!({
            "ID": "t1",
            "ServiceID": "s1",
            "Status": { "State": "running", "ContainerStatus": container.map(|c| serde_json::json!({ "ContainerID": c })) }
        }))
        .unwrap()
    }

    #[test]
    fn a_task_is_its_own_containers_of_its_own_service() {
        let cases = [
            (Some("c1"), Some("shop_web"), Vouch::Confirmed),
            // Another container's task: a copy of its labels.
            (Some("c2"), Some("shop_web"), Vouch::Denied),
            // A task of another service.
            (Some("c1"), Some("shop_api"), Vouch::Denied),
            (None, Some("shop_api"), Vouch::Denied),
            // Not reported yet: the labels stand.
            (None, Some("shop_web"), Vouch::Unknown),
            (Some("c1"), None, Vouch::Unknown),
        ];
        for (reported, service_name, expected) in cases {
            assert_eq!(
                judge("c1", "shop_web", &task(reported), service_name),
                expected,
                "{reported:?} {service_name:?}"
            );
        }
    }
}
