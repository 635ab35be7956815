//! The one mapping from every failure to an HTTP status and an OpenAI-style
//! error body (`{"error":{"message","type","param","code"}}`). The `code`
//! doubles as the label of the failure metric.

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use steward_engine::{GenerationError, PrepareError, SubmitError};
use steward_protocol::{ErrorBody, ErrorDetail};

#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    pub kind: &'static str,
    pub param: Option<String>,
    pub code: &'static str,
    pub retry_after: Option<u32>,
}

impl ApiError {
    pub fn invalid(message: impl Into<String>, param: Option<&str>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            param: param.map(str::to_string),
            code: "invalid_request",
            retry_after: None,
        }
    }

    pub fn invalid_value(message: impl Into<String>, param: &str) -> Self {
        ApiError {
            code: "invalid_value",
            ..Self::invalid(message, Some(param))
        }
    }

    pub fn unsupported(message: impl Into<String>, param: &str) -> Self {
        ApiError {
            code: "unsupported_parameter",
            ..Self::invalid(message, Some(param))
        }
    }

    pub fn model_not_found(name: &str) -> Self {
        // Quoted up to 128 characters: the error never echoes a huge field.
        let shown: String = name.chars().take(128).collect();
        let more = if shown.len() < name.len() { "…" } else { "" };
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: format!(
                "The model `{shown}{more}` does not exist or you do not have access to it."
            ),
            kind: "invalid_request_error",
            param: Some("model".into()),
            code: "model_not_found",
            retry_after: None,
        }
    }

    pub fn unauthorized() -> Self {
        ApiError {
            status: StatusCode::UNAUTHORIZED,
            message: "Incorrect or missing API key. Send it as `Authorization: Bearer <key>`."
                .into(),
            kind: "authentication_error",
            param: None,
            code: "invalid_api_key",
            retry_after: None,
        }
    }

    pub fn not_found(path: &str) -> Self {
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: format!("Unknown route: {path}"),
            kind: "invalid_request_error",
            param: None,
            code: "not_found",
            retry_after: None,
        }
    }

    pub fn method_not_allowed() -> Self {
        ApiError {
            status: StatusCode::METHOD_NOT_ALLOWED,
            message: "Method not allowed for this route".into(),
            kind: "invalid_request_error",
            param: None,
            code: "method_not_allowed",
            retry_after: None,
        }
    }

    pub fn unsupported_media_type() -> Self {
        ApiError {
            status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
            message: "POST bodies must be JSON: send `content-type: application/json`".into(),
            kind: "invalid_request_error",
            param: None,
            code: "unsupported_media_type",
            retry_after: None,
        }
    }

    pub fn body_too_large(cap: usize) -> Self {
        ApiError {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            message: format!("the request body is larger than {cap} bytes (--max-body-bytes)"),
            kind: "invalid_request_error",
            param: None,
            code: "request_too_large",
            retry_after: None,
        }
    }

    pub fn body_timeout(t: std::time::Duration) -> Self {
        ApiError {
            status: StatusCode::REQUEST_TIMEOUT,
            message: format!(
                "the request body did not arrive within {} s (--body-timeout-s)",
                t.as_secs_f64()
            ),
            kind: "invalid_request_error",
            param: None,
            code: "body_timeout",
            retry_after: None,
        }
    }

    /// 429 with `Retry-After`: a per-key rate limit or a bounded resource
    /// of the caller's own (open dashboard feeds).
    pub fn rate_limited(message: impl Into<String>, code: &'static str, retry_after: u32) -> Self {
        ApiError {
            status: StatusCode::TOO_MANY_REQUESTS,
            message: message.into(),
            kind: "rate_limit_error",
            param: None,
            code,
            retry_after: Some(retry_after.max(1)),
        }
    }

    fn overloaded(status: StatusCode, message: String, code: &'static str) -> Self {
        ApiError {
            status,
            message,
            kind: "server_error",
            param: None,
            code,
            retry_after: Some(1),
        }
    }

    pub fn internal(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: message.into(),
            kind: "server_error",
            param: None,
            code: "internal_error",
            retry_after: None,
        }
    }

    pub fn body(&self) -> ErrorBody {
        ErrorBody {
            error: ErrorDetail {
                message: self.message.clone(),
                kind: self.kind.to_string(),
                param: self.param.clone(),
                code: Some(self.code.to_string()),
            },
        }
    }
}

impl From<PrepareError> for ApiError {
    fn from(e: PrepareError) -> Self {
        match e {
            PrepareError::Busy(_) => Self::overloaded(
                StatusCode::SERVICE_UNAVAILABLE,
                e.to_string(),
                "tokenizer_busy",
            ),
            PrepareError::ContextLength { .. } => ApiError {
                code: "context_length_exceeded",
                ..Self::invalid(e.to_string(), Some("messages"))
            },
            PrepareError::EmptyPrompt => Self::invalid(e.to_string(), Some("prompt")),
            PrepareError::MaxTokens { .. } => Self::invalid_value(e.to_string(), "max_tokens"),
            PrepareError::Template(_) => ApiError {
                code: "template_error",
                ..Self::invalid(e.to_string(), Some("messages"))
            },
            PrepareError::Stopped => Self::overloaded(
                StatusCode::SERVICE_UNAVAILABLE,
                e.to_string(),
                "engine_stopped",
            ),
            PrepareError::GrammarBusy(_) => Self::overloaded(
                StatusCode::SERVICE_UNAVAILABLE,
                e.to_string(),
                "grammar_busy",
            ),
            PrepareError::Internal(_) => Self::internal(e.to_string()),
            // The text starts with the part's label (`messages[0].content[1]: …`).
            PrepareError::Media(m) => {
                let param = m
                    .split_once(": ")
                    .map(|(p, _)| p)
                    .filter(|p| p.starts_with("messages[") && !p.contains(' '))
                    .unwrap_or("messages")
                    .to_string();
                ApiError {
                    code: "invalid_media",
                    ..Self::invalid(m, Some(&param))
                }
            }
            PrepareError::MediaBusy(_) => Self::overloaded(
                StatusCode::SERVICE_UNAVAILABLE,
                e.to_string(),
                "encoder_busy",
            ),
            PrepareError::MediaTimeout(_) => Self::overloaded(
                StatusCode::SERVICE_UNAVAILABLE,
                e.to_string(),
                "encoder_timeout",
            ),
            PrepareError::Grammar(m) => ApiError {
                code: "invalid_grammar",
                ..Self::invalid(format!("the grammar does not compile: {m}"), None)
            },
        }
    }
}

impl From<SubmitError> for ApiError {
    fn from(e: SubmitError) -> Self {
        match e {
            SubmitError::QueueFull(_) => {
                Self::overloaded(StatusCode::TOO_MANY_REQUESTS, e.to_string(), "queue_full")
            }
            SubmitError::NotReady => {
                Self::overloaded(StatusCode::SERVICE_UNAVAILABLE, e.to_string(), "not_ready")
            }
            SubmitError::Draining => Self::overloaded(
                StatusCode::SERVICE_UNAVAILABLE,
                e.to_string(),
                "shutting_down",
            ),
            SubmitError::Stopped => Self::overloaded(
                StatusCode::SERVICE_UNAVAILABLE,
                e.to_string(),
                "engine_stopped",
            ),
        }
    }
}

impl From<GenerationError> for ApiError {
    fn from(e: GenerationError) -> Self {
        match e {
            GenerationError::Shutdown => Self::overloaded(
                StatusCode::SERVICE_UNAVAILABLE,
                e.to_string(),
                "shutting_down",
            ),
            GenerationError::Runtime(_) => Self::internal(e.to_string()),
            // The grammar could not be followed (too costly to mask, or it
            // allows no token): the request's grammar, not the server.
            GenerationError::Constraint(_) => ApiError {
                code: "invalid_grammar",
                ..Self::invalid(e.to_string(), None)
            },
            // The time allowed for the request (its own `timeout`, or
            // `--request-timeout-s`) ran out: a 408, not a 5xx, which would
            // tell clients and load balancers that the server failed.
            GenerationError::DeadlineExceeded(_) => ApiError {
                status: StatusCode::REQUEST_TIMEOUT,
                message: e.to_string(),
                kind: "timeout_error",
                param: None,
                code: "timeout",
                retry_after: None,
            },
            GenerationError::SlowReader(_) => ApiError {
                status: StatusCode::REQUEST_TIMEOUT,
                message: e.to_string(),
                kind: "invalid_request_error",
                param: None,
                code: "slow_reader",
                retry_after: None,
            },
            GenerationError::Cancelled => ApiError {
                status: StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST),
                message: e.to_string(),
                kind: "invalid_request_error",
                param: None,
                code: "cancelled",
                retry_after: None,
            },
            GenerationError::QueueTimeout(_) => Self::overloaded(
                StatusCode::SERVICE_UNAVAILABLE,
                e.to_string(),
                "queue_timeout",
            ),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut resp = (self.status, axum::Json(self.body())).into_response();
        if let Some(s) = self.retry_after {
            resp.headers_mut()
                .insert("retry-after", HeaderValue::from(s));
        }
        resp
    }
}
