//! Picket's integration tests: one binary, a module per area, so that the
//! workspace links one test binary rather than one per area, and areas
//! that mostly wait (on a bound, a runtime, a container) overlap.
//!
//! Tests that share something process-wide take turns through
//! `picket_tests`: the Swarm tests (`docker::swarm_turn`), the faults
//! under load; tests that count log lines capture their own runtime's
//! (`logs::runtime`), never the process's.
//!
//!   cargo test -p picket-tests --test integration               # every area
//!   cargo test -p picket-tests --test integration -- smuggling:: # one area

mod acme;
mod admin_places;
mod answers;
mod bounds;
mod breaker;
mod breaker_log;
mod checks;
mod cli;
mod clients;
mod cluster;
mod cluster_faults;
mod connection_limit;
mod day_two;
mod deploy_kubernetes;
mod deploy_swarm;
mod docker;
mod docs;
mod endings;
mod every_byte;
mod failover;
mod faults;
mod fd_exhaustion;
mod feed;
mod forward_proxy;
mod forwarding;
mod grpc;
mod h2_upstream;
mod health;
mod http1;
mod http_check;
mod kube;
mod kube_ingress;
mod kube_rbac;
mod latency;
mod layers;
mod ownership;
mod proxy;
mod read_only;
mod real_clients;
mod reload;
mod reload_fields;
mod restart;
mod runtime_breaker;
mod runtime_reach;
mod runtime_routes;
mod smuggling;
mod socket_proxy;
mod status_api;
mod stop;
mod swarm;
mod terminal;
mod tls_checks;
mod tls_edge;
mod tls_tickets;
mod tls_upstream;
mod traffic_wins;
mod trailers;
mod waits;
mod websocket;
