//! One order, by the node that orders: the account, the order, each
//! challenge passed to every node through gossip before the CA is told
//! to validate, then the key, the CSR and the certificate. The protocol
//! is instant-acme's; every wait here is bounded.
//!
//! The node has one account per directory ([`Accounts`]): made by the
//! first order that needs it (the others wait for it), kept in the cache,
//! reused by every order after. The challenge keys an order writes are
//! removed however it ends: done, failed, or aborted by a reload.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use instant_acme::{
    Account, AccountCredentials, AuthorizationStatus, ChallengeType, Identifier, NewAccount,
    NewOrder, OrderStatus, RetryPolicy,
};
use picket_proto::acme::{ALPN_PREFIX, HTTP_PREFIX, held_id};

use super::client::Http;
use super::shared;
use super::store;
use crate::config::{AcmeChallenge, AcmeSettings};
use crate::gossip::Membership;

/// The longest an order may take, from the account to the certificate.
pub const ORDER_DEADLINE: Duration = Duration::from_secs(300);
/// How long the ordering node waits for every live node to answer a
/// challenge before it asks the CA to validate anyway.
pub const HELD_WAIT: Duration = Duration::from_secs(30);
/// How often the ordering node looks whether every node answers.
const HELD_POLL: Duration = Duration::from_millis(25);

/// Why an order failed: what the CA said, or what stood in the way.
#[derive(Debug, thiserror::Error)]
pub enum OrderError {
    #[error("{0}")]
    Acme(#[from] instant_acme::Error),
    #[error("the CA offers no {0} challenge for {1}")]
    NoChallenge(&'static str, String),
    #[error("the CA found {name} invalid: {problem}")]
    Invalid { name: String, problem: String },
    #[error("the order is {0:?}")]
    Status(OrderStatus),
    #[error("the cache: {0}")]
    Cache(std::io::Error),
    #[error("the key: {0}")]
    Key(String),
    #[error(
        "the order took longer than {}",
        humantime::format_duration(ORDER_DEADLINE)
    )]
    Deadline,
    /// The directory URL is not an ACME directory, or cannot be reached.
    #[error("{0}")]
    Directory(String),
}

/// What an order needs.
pub struct Ordering {
    pub settings: Arc<AcmeSettings>,
    pub names: Vec<String>,
    pub membership: Arc<Membership>,
    pub http: Arc<Http>,
    pub accounts: Arc<Accounts>,
}

/// The node's ACME accounts, one per directory.
#[derive(Default)]
pub struct Accounts(tokio::sync::Mutex<HashMap<String, Account>>);

impl Accounts {
    /// The account at the directory of `settings`: known, else read from
    /// the cache, else made (and kept). Orders that ask at once wait for
    /// the first: one account, however many orders start together.
    async fn get(&self, settings: &AcmeSettings, http: &Arc<Http>) -> Result<Account, OrderError> {
        let mut accounts = self.0.lock().await;
        if let Some(account) = accounts.get(&settings.directory) {
            return Ok(account.clone());
        }
        let account = account(settings, http).await?;
        accounts.insert(settings.directory.clone(), account.clone());
        Ok(account)
    }
}

/// The challenge keys an order wrote: removed when it ends, and when its
/// task is aborted (a reload that drops the certificate), from a task of
/// their own.
struct Written {
    membership: Arc<Membership>,
    keys: Vec<String>,
}

impl Drop for Written {
    fn drop(&mut self) {
        let keys = std::mem::take(&mut self.keys);
        if keys.is_empty() {
            return;
        }
        let membership = Arc::clone(&self.membership);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                for key in keys {
                    membership.delete_own(&key).await;
                }
            });
        }
    }
}

/// Orders the certificate of `ordering.names`; returns its chain and key
/// as PEM. The challenge keys it wrote are removed whatever happens.
pub async fn order(ordering: &Ordering) -> Result<String, OrderError> {
    let mut written = Written {
        membership: Arc::clone(&ordering.membership),
        keys: Vec::new(),
    };
    let result = tokio::time::timeout(ORDER_DEADLINE, steps(ordering, &mut written.keys)).await;
    for key in std::mem::take(&mut written.keys) {
        ordering.membership.delete_own(&key).await;
    }
    result.unwrap_or(Err(OrderError::Deadline))
}

async fn steps(ordering: &Ordering, written: &mut Vec<String>) -> Result<String, OrderError> {
    let settings = &ordering.settings;
    let account = ordering.accounts.get(settings, &ordering.http).await?;
    let identifiers: Vec<Identifier> = ordering
        .names
        .iter()
        .map(|name| Identifier::Dns(name.clone()))
        .collect();
    let mut order = account.new_order(&NewOrder::new(&identifiers)).await?;
    let kind = match settings.challenge {
        AcmeChallenge::Http01 => ChallengeType::Http01,
        AcmeChallenge::TlsAlpn01 => ChallengeType::TlsAlpn01,
    };
    let mut wanted = Vec::new();
    {
        let mut authorizations = order.authorizations();
        while let Some(authorization) = authorizations.next().await {
            let mut authorization = authorization?;
            if authorization.status == AuthorizationStatus::Valid {
                continue;
            }
            let name = authorization.identifier().to_string();
            let challenge = authorization.challenge(kind.clone()).ok_or_else(|| {
                OrderError::NoChallenge(settings.challenge.as_str(), name.clone())
            })?;
            let authorization = challenge.key_authorization().as_str().to_string();
            let (key, id) = match settings.challenge {
                AcmeChallenge::Http01 => {
                    let token = challenge.token.clone();
                    (format!("{HTTP_PREFIX}{token}"), held_id(&token))
                }
                AcmeChallenge::TlsAlpn01 => (
                    format!("{ALPN_PREFIX}{name}"),
                    held_id(&format!("alpn:{name}")),
                ),
            };
            ordering.membership.set_own(&key, &authorization).await;
            written.push(key);
            wanted.push((id, challenge.url.clone()));
        }
    }
    if !wanted.is_empty() {
        let ids: Vec<&str> = wanted.iter().map(|(id, _)| id.as_str()).collect();
        every_node_answers(ordering, &ids).await;
        let mut authorizations = order.authorizations();
        while let Some(authorization) = authorizations.next().await {
            let mut authorization = authorization?;
            if authorization.status != AuthorizationStatus::Pending {
                continue;
            }
            if let Some(mut challenge) = authorization.challenge(kind.clone()) {
                challenge.set_ready().await?;
            }
        }
    }
    let retries = RetryPolicy::new()
        .initial_delay(Duration::from_millis(100))
        .backoff(1.5)
        .timeout(Duration::from_secs(120));
    let status = order.poll_ready(&retries).await?;
    if status != OrderStatus::Ready {
        return Err(why_invalid(&mut order, status).await);
    }
    let key = rcgen::KeyPair::generate().map_err(|e| OrderError::Key(e.to_string()))?;
    let mut params = rcgen::CertificateParams::new(ordering.names.clone())
        .map_err(|e| OrderError::Key(e.to_string()))?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    let csr = params
        .serialize_request(&key)
        .map_err(|e| OrderError::Key(e.to_string()))?;
    order.finalize_csr(csr.der()).await?;
    let chain = order.poll_certificate(&retries).await?;
    let mut pem = chain;
    if !pem.ends_with('\n') {
        pem.push('\n');
    }
    pem.push_str(&key.serialize_pem());
    Ok(pem)
}

/// Waits, at most [`HELD_WAIT`], until every live node that manages
/// ACME certificates says it answers each of `ids`; says which did not.
async fn every_node_answers(ordering: &Ordering, ids: &[&str]) {
    let deadline = tokio::time::Instant::now() + HELD_WAIT;
    let me = ordering.membership.info.name.clone();
    loop {
        let entries = ordering.membership.acme_entries().await;
        let shared = shared::read(&entries);
        let mut missing: Vec<&str> = shared
            .states
            .keys()
            .chain(std::iter::once(&me))
            .filter(|node| {
                let held = shared.held.get(*node);
                !ids.iter()
                    .all(|id| held.is_some_and(|h| h.iter().any(|x| x == id)))
            })
            .map(String::as_str)
            .collect();
        if missing.is_empty() {
            return;
        }
        if tokio::time::Instant::now() >= deadline {
            missing.sort();
            missing.dedup();
            tracing::warn!(
                names = %ordering.names.join(", "),
                nodes = %missing.join(", "),
                "ACME challenge not confirmed by every node; asking the CA to validate anyway"
            );
            return;
        }
        tokio::time::sleep(HELD_POLL).await;
    }
}

/// What the CA said of an order that is not ready: the first challenge
/// error it gives.
async fn why_invalid(order: &mut instant_acme::Order, status: OrderStatus) -> OrderError {
    let mut authorizations = order.authorizations();
    while let Some(Ok(mut authorization)) = authorizations.next().await {
        let name = authorization.identifier().to_string();
        if authorization.refresh().await.is_err() {
            continue;
        }
        for challenge in &authorization.challenges {
            if let Some(problem) = &challenge.error {
                return OrderError::Invalid {
                    name,
                    problem: problem.to_string(),
                };
            }
        }
    }
    OrderError::Status(status)
}

/// What the directory URL answers, unless it is an ACME directory: an
/// error that says what to change.
async fn probe(settings: &AcmeSettings, http: &Http) -> Result<(), OrderError> {
    let url = &settings.directory;
    let (status, body) = http
        .get(url)
        .await
        .map_err(|e| OrderError::Directory(format!("[acme] directory {url}: {e}")))?;
    let hint = "is [acme] directory the CA's directory URL (such as https://acme-v02.api.letsencrypt.org/directory)?";
    if !status.is_success() {
        return Err(OrderError::Directory(format!(
            "[acme] directory {url} answers {status}: {hint}"
        )));
    }
    let directory: Option<serde_json::Value> = serde_json::from_slice(&body).ok();
    let complete = directory.as_ref().is_some_and(|d| {
        ["newNonce", "newAccount", "newOrder"]
            .iter()
            .all(|field| d[*field].is_string())
    });
    if !complete {
        return Err(OrderError::Directory(format!(
            "[acme] directory {url} answers, but not with an ACME directory (newNonce, newAccount, newOrder): {hint}"
        )));
    }
    Ok(())
}

/// The node's account at the CA: from the cache, else made (and kept).
async fn account(settings: &AcmeSettings, http: &Arc<Http>) -> Result<Account, OrderError> {
    probe(settings, http).await?;
    let file = store::account_file(&settings.cache, &settings.directory);
    let cached = store::read(&file).map_err(OrderError::Cache)?;
    if let Some(text) = cached {
        match serde_json::from_str::<AccountCredentials>(&text) {
            Ok(credentials) => {
                return Ok(
                    Account::builder_with_http(Box::new(Shared(Arc::clone(http))))
                        .from_credentials(credentials)
                        .await?,
                );
            }
            Err(error) => {
                tracing::warn!(file = %file.display(), %error, "the cached ACME account is unreadable; making a new one");
            }
        }
    }
    let contact = settings
        .email
        .as_ref()
        .map(|email| format!("mailto:{email}"));
    let contacts: Vec<&str> = contact.iter().map(String::as_str).collect();
    let (account, credentials) = Account::builder_with_http(Box::new(Shared(Arc::clone(http))))
        .create(
            &NewAccount {
                contact: &contacts,
                terms_of_service_agreed: true,
                only_return_existing: false,
            },
            settings.directory.clone(),
            None,
        )
        .await?;
    let text = serde_json::to_string(&credentials).map_err(|e| OrderError::Key(e.to_string()))?;
    store::write(&file, &text).map_err(OrderError::Cache)?;
    tracing::info!(directory = %settings.directory, "ACME account made");
    Ok(account)
}

/// One client shared by every account.
struct Shared(Arc<Http>);

impl instant_acme::HttpClient for Shared {
    fn request(
        &self,
        req: http::Request<instant_acme::BodyWrapper<bytes::Bytes>>,
    ) -> std::pin::Pin<
        Box<
            dyn std::future::Future<
                    Output = Result<instant_acme::BytesResponse, instant_acme::Error>,
                > + Send,
        >,
    > {
        self.0.request(req)
    }
}
