//! The schemas of the Batch API's bodies (`batch/api.rs` reads and writes
//! them; the Batch object is `batch/store.rs`' `BatchObject`, the File
//! object `batch/files.rs`' `FileRecord::object`).

use serde_json::{json, Value};

use super::parts::{count, nullable, obj};

/// `(name, schema)` of every Batch API schema.
pub(super) fn schemas() -> Vec<(&'static str, Value)> {
    let r = |name: &str| json!({"$ref": format!("#/components/schemas/{name}")});
    let list = |item: &str, what: &str| {
        obj(
            &["object", "data", "first_id", "last_id", "has_more"],
            json!({
                "object": {"const": "list"},
                "data": {"type": "array", "description": what, "items": r(item)},
                "first_id": nullable("string"),
                "last_id": nullable("string"),
                "has_more": {"type": "boolean"},
            }),
        )
    };
    let time = || nullable("integer");
    vec![
        (
            "FileUpload",
            json!({
                "type": "object",
                "description": "A JSONL file of batch requests, one a line: `{\"custom_id\", \"method\": \"POST\", \"url\", \"body\"}` (checked when a batch is created from it). At most `--batch-max-file-bytes` and `--batch-max-lines`, within the state directory's `--batch-max-bytes` (413 past a byte bound).",
                "required": ["purpose", "file"],
                "properties": {
                    "purpose": {"enum": ["batch"], "description": "`batch` (any other is refused, 400)"},
                    "file": {"type": "string", "contentMediaType": "application/octet-stream"},
                },
            }),
        ),
        (
            "FileObject",
            obj(
                &[
                    "id",
                    "object",
                    "bytes",
                    "created_at",
                    "expires_at",
                    "filename",
                    "purpose",
                    "status",
                    "status_details",
                ],
                json!({
                    "id": {"type": "string"},
                    "object": {"const": "file"},
                    "bytes": count(),
                    "created_at": count(),
                    "expires_at": time(),
                    "filename": {"type": "string"},
                    "purpose": {"enum": ["batch", "batch_output"], "description": "`batch`: an upload; `batch_output`: a batch's output or error file"},
                    "status": {"const": "processed"},
                    "status_details": nullable("string"),
                }),
            ),
        ),
        (
            "FileList",
            list(
                "FileObject",
                "The caller's files, newest first (`order=asc`: oldest first)",
            ),
        ),
        (
            "FileDeleted",
            obj(
                &["id", "object", "deleted"],
                json!({
                    "id": {"type": "string"},
                    "object": {"const": "file"},
                    "deleted": {"const": true},
                }),
            ),
        ),
        (
            "FileContent",
            json!({
                "type": "string",
                "description": "The file's bytes as uploaded; a batch's output and error files hold one JSON object a line: `{\"id\": \"batch_req_…\", \"custom_id\", \"response\": {\"status_code\", \"request_id\", \"body\"} | null, \"error\": {\"code\", \"message\"} | null}`",
            }),
        ),
        (
            "BatchCreateRequest",
            json!({
                "type": "object",
                "required": ["input_file_id", "endpoint", "completion_window"],
                "properties": {
                    "input_file_id": {"type": "string", "description": "An uploaded file of purpose `batch`"},
                    "endpoint": {"enum": ["/v1/chat/completions", "/v1/completions", "/v1/embeddings"], "description": "Every line's `url`"},
                    "completion_window": {"const": "24h"},
                    "metadata": {
                        "type": ["object", "null"],
                        "maxProperties": 16,
                        "propertyNames": {"maxLength": 64},
                        "additionalProperties": {"type": "string", "maxLength": 512},
                    },
                },
            }),
        ),
        ("Batch", batch()),
        (
            "BatchList",
            list("Batch", "The caller's batches, newest first"),
        ),
    ]
}

fn batch() -> Value {
    let time = || nullable("integer");
    let error = obj(
        &["code", "message", "param", "line"],
        json!({
            "code": {"type": "string"},
            "message": {"type": "string"},
            "param": nullable("string"),
            "line": {"type": ["integer", "null"], "minimum": 1, "description": "The input file's line (from 1)"},
        }),
    );
    json!({
        "type": "object",
        "description": "A batch: `validating` → `in_progress` → `finalizing` → `completed`, or `failed` (its input broke the rules: `errors`), `expired` (the window ended: unanswered lines are `batch_expired` in the error file), `cancelling` → `cancelled`. `request_counts` count the lines answered (`completed`: 2xx, in the output file; `failed`: in the error file).",
        "required": ["id", "object", "endpoint", "errors", "input_file_id", "completion_window", "status",
            "output_file_id", "error_file_id", "created_at", "in_progress_at", "expires_at", "finalizing_at",
            "completed_at", "failed_at", "expired_at", "cancelling_at", "cancelled_at", "request_counts", "metadata"],
        "properties": {
            "id": {"type": "string"},
            "object": {"const": "batch"},
            "endpoint": {"type": "string"},
            "errors": {"anyOf": [{"type": "null"}, obj(&["object", "data"], json!({
                "object": {"const": "list"},
                "data": {"type": "array", "items": error},
            }))]},
            "input_file_id": {"type": "string"},
            "completion_window": {"type": "string"},
            "status": {"enum": ["validating", "failed", "in_progress", "finalizing", "completed", "expired", "cancelling", "cancelled"]},
            "output_file_id": nullable("string"),
            "error_file_id": nullable("string"),
            "created_at": count(),
            "in_progress_at": time(),
            "expires_at": time(),
            "finalizing_at": time(),
            "completed_at": time(),
            "failed_at": time(),
            "expired_at": time(),
            "cancelling_at": time(),
            "cancelled_at": time(),
            "request_counts": obj(&["total", "completed", "failed"], json!({
                "total": count(),
                "completed": count(),
                "failed": count(),
            })),
            "metadata": {"type": ["object", "null"], "additionalProperties": {"type": "string"}},
        },
    })
}
