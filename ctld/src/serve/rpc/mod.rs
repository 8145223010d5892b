//! The client side of ctld: a Unix socket whose peers are identified by `SO_PEERCRED`. Each
//! connection is admitted by its uid ([`admission`]: connections per user, memory for unfinished
//! requests, requests served at once), says hello, then sends requests one at a time until it
//! closes or stays silent for `controller.client_idle_timeout`. Job queries are answered from the
//! published snapshot; accounting, usage, audit, config and pings by their handler files, off the
//! core (the database readers on their own connections); every other request goes to the core as
//! it came, in one [`Event::Client`], and its answer comes back on a oneshot channel.

mod accounting;
pub(crate) mod admission;
mod audit;
mod config;
pub(crate) mod context;
mod history;
mod simulate;
mod templates;
mod usage;

use crate::core::Event;
use crate::model::identity::Caller;
use crate::model::snapshot::Ask;
use crate::serve::error::ConnectionError;
use context::ClientContext;
use drover_shared::job::fields::JobFields;
use drover_shared::proto::client::{ErrorCode, JobQuery, MAX_LIST_ITEMS, Request, Response};
use drover_shared::proto::frame::{MAX_REQUEST_FRAME, MessageStream};
use drover_shared::proto::{Hello, HelloReply, MAGIC, PROTOCOL_VERSION, Role, version_supported};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::oneshot;

/// A client that has not finished its hello by then is dropped (slow-loris bound).
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);

/// Accepts client connections until the listener fails. Accepting never waits for room: a
/// connection beyond its user's share is refused at once with the reason, so that one user
/// holding many connections cannot leave everyone else's waiting in the kernel's accept queue.
pub(crate) async fn serve(listener: UnixListener, context: ClientContext) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let context = context.clone();
                tokio::spawn(async move {
                    if let Err(e) = handle(stream, context).await {
                        tracing::debug!(error = %e, "client connection ended");
                    }
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "accept on client socket failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn handle(stream: UnixStream, context: ClientContext) -> Result<(), ConnectionError> {
    let cred = stream.peer_cred()?;
    let caller = Caller::local(cred.uid(), cred.gid());
    let admitted = match admit(&context, caller) {
        Ok(admitted) => admitted,
        Err(refusal) => {
            refuse(stream, &refusal).await;
            return Ok(());
        }
    };
    let mut messages = MessageStream::new(stream);
    let hello: Option<Hello> = tokio::time::timeout(HELLO_TIMEOUT, messages.recv()).await??;
    let Some(hello) = hello else { return Ok(()) };
    if hello.magic != MAGIC || !version_supported(hello.protocol_version) || hello.role != Role::Client {
        let message = format!("unsupported hello (protocol version {})", hello.protocol_version);
        messages.send(&HelloReply::Reject { message }).await?;
        return Ok(());
    }
    messages
        .send(&HelloReply::Accept { protocol_version: PROTOCOL_VERSION, nonce: Vec::new(), proof: Vec::new() })
        .await?;
    serve_requests(messages, caller, admitted, &context).await
}

/// Counts a client connection in under its uid's limits (see [`admission`]), or says why not.
pub(crate) fn admit(context: &ClientContext, caller: Caller) -> Result<admission::Admitted, admission::Refusal> {
    let config = context.config.get();
    let privileged = admission::privileged(&config, caller.uid);
    let admitted = context.admission.admit(caller.uid, privileged, config.max_connections_per_user as usize);
    if let Err(refusal) = &admitted {
        tracing::debug!(uid = caller.uid, %refusal, "client connection refused");
    }
    admitted
}

/// Refuses a connection before its hello: the refusal is the first frame the client reads. What
/// the client already sent is read without waiting (a socket closed with unread bytes would
/// reset), then the connection is closed; nothing of it outlives this call.
async fn refuse(stream: UnixStream, refusal: &admission::Refusal) {
    let mut messages = MessageStream::new(stream);
    let reject = HelloReply::Reject { message: refusal.to_string() };
    let _ = tokio::time::timeout(Duration::from_millis(100), messages.send(&reject)).await;
    let mut stream = messages.into_stream();
    let _ = stream.try_read(&mut [0u8; 4096]);
    let _ = tokio::io::AsyncWriteExt::shutdown(&mut stream).await;
}

/// Answers an accepted client's requests, one at a time, until it closes or idles out; the
/// caller's identity was established by the hello (`SO_PEERCRED` or a token).
///
/// A request must arrive whole within `controller.client_idle_timeout` of the hello or of the
/// previous answer, or the connection is closed (a request still arriving then included: that is
/// how long an unfinished frame can hold memory). Reading a request grows its buffer only as its
/// bytes arrive, drawing on the uid's memory pools beyond a small free buffer, and holds what it
/// drew until the next read starts, so the decoded request is covered while it waits and is
/// served; serving it takes one of the uid's turns, held until the answer is written.
pub(crate) async fn serve_requests<S>(
    mut messages: MessageStream<S>,
    caller: Caller,
    admitted: admission::Admitted,
    context: &ClientContext,
) -> Result<(), ConnectionError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    messages.set_max_frame(MAX_REQUEST_FRAME);
    messages.set_read_budget(admitted.budget.clone());
    loop {
        let idle = Duration::from_secs(u64::from(context.config.get().client_idle_timeout));
        let request: Option<Request> = match tokio::time::timeout(idle, messages.recv()).await {
            Err(_) => {
                tracing::debug!(uid = caller.uid, "idle client connection closed");
                return Ok(());
            }
            Ok(r) => r?,
        };
        let Some(request) = request else { return Ok(()) };
        let Ok(_turn) = admitted.turns.acquire().await else { return Ok(()) };
        let (kind, began) = (crate::core::metrics::request_name(&request), std::time::Instant::now());
        if request.longest_list() > MAX_LIST_ITEMS {
            let detail = format!("a request may name at most {MAX_LIST_ITEMS} jobs, users or accounts at once");
            messages.send(&Response::Error { code: ErrorCode::InvalidSpec, detail }).await?;
            continue;
        }
        match job_query(&request) {
            None => {}
            Some(Err(detail)) => {
                messages.send(&Response::Error { code: ErrorCode::InvalidSpec, detail }).await?;
                continue;
            }
            Some(Ok((mut query, ask))) => {
                // From the published snapshot, off the core, encoded without copying the records
                // (and unchanged chunks' parts reused from the last query that asked the same);
                // under `PrivateData=jobs` a user's query sees only their own jobs.
                let visible = crate::policy::authz::narrow_job_query(&context.config.get(), caller, &mut query);
                let snapshot = if visible { context.jobs.borrow().clone() } else { Arc::default() };
                let now = drover_shared::now();
                let answer = tokio::task::spawn_blocking(move || {
                    crate::model::snapshot::encode_jobs(&snapshot, &query, &ask, now)
                });
                match answer.await {
                    Ok(Ok(payload)) => messages.send_encoded_answer(payload).await?,
                    _ => messages.send(&unavailable()).await?,
                }
                context.metrics.rpc(kind, began.elapsed());
                continue;
            }
        }
        let answering = context.answering.begin();
        let response = dispatch(request, caller, context).await;
        context.metrics.rpc(kind, began.elapsed());
        messages.send_answer(&response).await?;
        drop(answering);
    }
}

/// A job query's filters and what it wants of each job; `None` for any other request, `Err` (why)
/// for a line format ctld refuses to render.
fn job_query(request: &Request) -> Option<Result<(JobQuery, Ask), String>> {
    match request {
        Request::QueryJobs(query) => Some(Ok((query.clone(), Ask::Records(JobFields::ALL)))),
        Request::QueryJobFields { query, fields } => Some(Ok((query.clone(), Ask::Records(*fields)))),
        Request::QueryJobLines { query, format } => {
            Some(format.check().map(|()| (query.clone(), Ask::Lines(Arc::new(format.clone()), None))))
        }
        _ => None,
    }
}

/// Answers a request that is not a job query: accounting, audit, usage, config and pings here,
/// off the core; everything else by the core, as one [`Event::Client`] (shares, priorities and
/// `drover why` with this caller's view of them applied here).
async fn dispatch(request: Request, caller: Caller, context: &ClientContext) -> Response {
    match request {
        // Answered by `serve_requests` before it dispatches anything, off the core.
        Request::QueryJobs(_) | Request::QueryJobFields { .. } | Request::QueryJobLines { .. } => unavailable(),
        Request::QueryAccounting(query) => accounting::query(context, caller, query).await,
        Request::QueryUsage(query) => usage::query(context, caller, query).await,
        Request::QueryAudit(query) => audit::query(context, caller, query).await,
        Request::QueryNodeHistory { node, limit } => history::query(context, caller, node, limit).await,
        Request::QueryJobUsage { job_ids } => accounting::usage(context, caller, job_ids).await,
        Request::QueryStepUsage { job_ids } => accounting::step_usage(context, caller, job_ids).await,
        Request::ShowConfig => config::show(context),
        Request::QueryTemplates => templates::list(context, caller),
        Request::Sacctmgr { args } => config::sacctmgr(context, caller, &args),
        Request::QueryReplicas => {
            Response::Replicas { replicas: context.replicas.as_ref().map(|r| r.borrow().clone()).unwrap_or_default() }
        }
        Request::Simulate(request) => simulate::simulate(context, caller, *request).await,
        Request::Ping => Response::Pong {
            cluster: context.config.get().cluster_name.clone(),
            controller: nix::unistd::gethostname().map(|h| h.to_string_lossy().into_owned()).unwrap_or_default(),
        },
        Request::Explain { job_id } if !accounting::owns(context, caller, job_id) => {
            Response::Error { code: ErrorCode::InvalidJobId, detail: "private job".into() }
        }
        Request::QueryShares => usage::shares(context, caller, ask_core(context, caller, request).await),
        Request::QueryPriority => accounting::priorities(context, caller, ask_core(context, caller, request).await),
        request => ask_core(context, caller, request).await,
    }
}

/// Hands a request to the core and waits for its answer (after the commit, for a change).
async fn ask_core(context: &ClientContext, caller: Caller, request: Request) -> Response {
    let (reply, answer) = oneshot::channel();
    if context.events.send(Event::Client { caller, request, reply }).is_err() {
        return unavailable();
    }
    answer.await.unwrap_or_else(|_| unavailable())
}

fn unavailable() -> Response {
    Response::Error { code: ErrorCode::Internal, detail: "controller is shutting down".into() }
}
