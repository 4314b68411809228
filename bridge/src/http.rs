//! The HTTP surface (DESIGN §11): the node API, the Alertmanager webhook receiver,
//! `/metrics`, `/healthz` and `/readyz`. Errors are JSON `{error, detail}`; mutating
//! endpoints and the receiver require the bearer token when one is configured.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use crate::alertmanager::IngestError;
use crate::core::CoreError;
use crate::metrics::CodeLabel;
use crate::service::Hale;
use crate::view::{ClearRequest, ErrorBody, FailureReport, NodeList};

/// An error answer.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    error: &'static str,
    detail: String,
}

impl ApiError {
    fn new(status: StatusCode, error: &'static str, detail: impl Into<String>) -> Self {
        ApiError {
            status,
            error,
            detail: detail.into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: self.error.into(),
            detail: self.detail,
        };
        (self.status, Json(body)).into_response()
    }
}

impl From<CoreError> for ApiError {
    fn from(e: CoreError) -> Self {
        match e {
            CoreError::UnknownNode(_) | CoreError::UnknownCondition { .. } => {
                ApiError::new(StatusCode::NOT_FOUND, "not_found", e.to_string())
            }
            CoreError::NotClearable { .. } => {
                ApiError::new(StatusCode::CONFLICT, "conflict", e.to_string())
            }
        }
    }
}

impl From<JsonRejection> for ApiError {
    fn from(e: JsonRejection) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_request", e.body_text())
    }
}

type ApiResult<T> = Result<T, ApiError>;

pub fn router(hale: Arc<Hale>) -> Router {
    Router::new()
        .route("/api/v1/nodes", get(list_nodes))
        .route("/api/v1/nodes/{id}", get(show_node).delete(decommission))
        .route("/api/v1/nodes/{id}/failures", post(attribute_failure))
        .route(
            "/api/v1/nodes/{id}/conditions/{ctype}/clear",
            post(clear_condition),
        )
        .route("/api/v1/alerts", get(alerts))
        .route("/api/v1/alertmanager", post(webhook))
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .fallback(|| async {
            ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such endpoint")
        })
        .with_state(hale)
}

/// Check the bearer token in constant time.
fn authorize(hale: &Hale, headers: &HeaderMap) -> ApiResult<()> {
    let cfg = hale.config();
    let Some(want) = cfg.api_token.as_deref() else {
        return Ok(());
    };
    let got = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    if constant_time_eq(got.as_bytes(), want.as_bytes()) {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "a valid bearer token is required",
        ))
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn list_nodes(State(hale): State<Arc<Hale>>) -> Json<NodeList> {
    let nodes = hale.nodes().iter().map(|n| n.summary()).collect();
    Json(NodeList { nodes })
}

fn unknown(id: &str) -> ApiError {
    ApiError::from(CoreError::UnknownNode(id.into()))
}

async fn show_node(
    State(hale): State<Arc<Hale>>,
    Path(id): Path<String>,
) -> ApiResult<impl IntoResponse> {
    hale.node(&id).map(Json).ok_or_else(|| unknown(&id))
}

async fn decommission(
    State(hale): State<Arc<Hale>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> ApiResult<StatusCode> {
    authorize(&hale, &headers)?;
    blocking(move || hale.apply(|fleet, cfg, now| fleet.decommission(cfg, now, &id))).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn attribute_failure(
    State(hale): State<Arc<Hale>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Result<Json<FailureReport>, JsonRejection>,
) -> ApiResult<impl IntoResponse> {
    authorize(&hale, &headers)?;
    let Json(report) = body?;
    if report.job.trim().is_empty() {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "job must name the failed job",
        ));
    }
    let h = hale.clone();
    let node = id.clone();
    blocking(move || {
        h.apply(|fleet, cfg, now| {
            fleet.attribute_failure(
                cfg,
                now,
                &node,
                &report.job,
                report.reason.as_deref(),
                report.occurred_at,
            )
        })
    })
    .await?;
    Ok((
        StatusCode::CREATED,
        Json(hale.node(&id).ok_or_else(|| unknown(&id))?),
    ))
}

async fn clear_condition(
    State(hale): State<Arc<Hale>>,
    Path((id, ctype)): Path<(String, String)>,
    headers: HeaderMap,
    body: Option<Json<ClearRequest>>,
) -> ApiResult<impl IntoResponse> {
    authorize(&hale, &headers)?;
    let reason = body.map(|Json(b)| b.reason).unwrap_or_default();
    let h = hale.clone();
    let node = id.clone();
    blocking(move || {
        h.apply(|fleet, cfg, now| fleet.clear_condition(cfg, now, &node, &ctype, &reason))
    })
    .await?;
    Ok(Json(hale.node(&id).ok_or_else(|| unknown(&id))?))
}

async fn alerts(State(hale): State<Arc<Hale>>) -> ApiResult<impl IntoResponse> {
    hale.alerts()
        .await
        .map(Json)
        .map_err(|e| ApiError::new(StatusCode::BAD_GATEWAY, "source_unavailable", e.to_string()))
}

/// The Alertmanager webhook receiver. The body is read up to the configured limit;
/// nothing is applied unless all of it parses.
async fn webhook(State(hale): State<Arc<Hale>>, headers: HeaderMap, body: Body) -> Response {
    let answer = receive(hale.clone(), headers, body).await;
    let response = match answer {
        Ok(result) => Json(result).into_response(),
        Err(e) => e.into_response(),
    };
    hale.metrics
        .webhook_requests
        .get_or_create(&CodeLabel {
            code: response.status().as_u16().to_string(),
        })
        .inc();
    response
}

async fn receive(
    hale: Arc<Hale>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<crate::service::WebhookResult> {
    authorize(&hale, &headers)?;
    let limit = hale.config().config.alertmanager.max_webhook_bytes;
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("webhook bodies are limited to {limit} bytes (alertmanager.maxWebhookBytes)"),
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(too_large());
    }
    let bytes = axum::body::to_bytes(body, limit)
        .await
        .map_err(|_| too_large())?;
    blocking(move || hale.ingest_webhook(&bytes))
        .await
        .map_err(|e: IngestError| {
            ApiError::new(StatusCode::BAD_REQUEST, "bad_request", e.to_string())
        })
}

async fn metrics(State(hale): State<Arc<Hale>>) -> impl IntoResponse {
    let text = tokio::task::spawn_blocking(move || hale.metrics.render())
        .await
        .unwrap_or_default();
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
}

async fn readyz(State(hale): State<Arc<Hale>>) -> ApiResult<&'static str> {
    if hale.ready() {
        Ok("ready")
    } else {
        Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "not_ready",
            "the first Alertmanager poll has not completed yet",
        ))
    }
}

/// Run a store-touching closure off the async workers.
async fn blocking<T, E>(f: impl FnOnce() -> Result<T, E> + Send + 'static) -> Result<T, E>
where
    T: Send + 'static,
    E: Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .expect("blocking task panicked")
}
