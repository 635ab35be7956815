//! The Batch API's operations (`batch/api.rs`): placeholders, as the
//! others in `openapi.rs`.

use std::collections::BTreeMap;

use utoipa::openapi::{self, RefOr};

use super::error_responses;
use super::schemas::{
    Batch, BatchCreateRequest, BatchList, FileContent, FileDeleted, FileList, FileObject,
    FileUpload,
};

errors! {
    UploadErrors("ErrorBody"): [400, 401, 404, 408, 413, 415, 429, 500, 503];
    FileReadErrors("ErrorBody"): [400, 401, 404, 429, 500, 503];
    FileDeleteErrors("ErrorBody"): [400, 401, 404, 409, 429, 500, 503];
    BatchCreateErrors("ErrorBody"): [400, 401, 404, 408, 413, 415, 429, 500, 503];
    BatchReadErrors("ErrorBody"): [400, 401, 404, 429, 503];
    BatchCancelErrors("ErrorBody"): [400, 401, 404, 408, 409, 413, 415, 429, 500, 503];
}

#[utoipa::path(
    post, path = "/v1/files", tag = "batch",
    summary = "Upload a batch input file (JSONL)",
    request_body(content = FileUpload, content_type = "multipart/form-data"),
    responses((status = 200, description = "The file", body = FileObject), UploadErrors),
    security(("bearerAuth" = []), ("apiKey" = []))
)]
#[allow(dead_code)]
pub(super) fn upload_file() {}

#[utoipa::path(
    get, path = "/v1/files", tag = "batch",
    summary = "The caller's files",
    params(
        ("purpose" = Option<String>, Query, description = "Only files of this purpose (`batch`, `batch_output`)"),
        ("limit" = Option<u32>, Query, description = "Files per page (default 10000)", minimum = 1, maximum = 10000),
        ("after" = Option<String>, Query, description = "Files after the file of this ID, in that order"),
        ("order" = Option<String>, Query, description = "`asc` or `desc` (default: newest first)", pattern = "^(asc|desc)$"),
    ),
    responses((status = 200, description = "The page", body = FileList), BatchReadErrors),
    security(("bearerAuth" = []), ("apiKey" = []))
)]
#[allow(dead_code)]
pub(super) fn list_files() {}

#[utoipa::path(
    get, path = "/v1/files/{id}", tag = "batch",
    summary = "A file",
    params(("id" = String, Path, description = "The file's ID")),
    responses((status = 200, description = "The file", body = FileObject), BatchReadErrors),
    security(("bearerAuth" = []), ("apiKey" = []))
)]
#[allow(dead_code)]
pub(super) fn get_file() {}

#[utoipa::path(
    delete, path = "/v1/files/{id}", tag = "batch",
    summary = "Delete a file (409 while a batch not yet ended reads it)",
    params(("id" = String, Path, description = "The file's ID")),
    responses((status = 200, description = "Deleted", body = FileDeleted), FileDeleteErrors),
    security(("bearerAuth" = []), ("apiKey" = []))
)]
#[allow(dead_code)]
pub(super) fn delete_file() {}

#[utoipa::path(
    get, path = "/v1/files/{id}/content", tag = "batch",
    summary = "A file's bytes (a batch's output and error files: JSONL)",
    params(("id" = String, Path, description = "The file's ID")),
    responses(
        (status = 200, description = "The bytes", content((FileContent = "application/octet-stream"))),
        FileReadErrors,
    ),
    security(("bearerAuth" = []), ("apiKey" = []))
)]
#[allow(dead_code)]
pub(super) fn file_content() {}

#[utoipa::path(
    post, path = "/v1/batches", tag = "batch",
    summary = "Create a batch over an uploaded file (its lines checked now: a file that breaks the rules makes a `failed` batch with `errors`)",
    request_body(content = BatchCreateRequest, example = json!({"input_file_id": "file-abc", "endpoint": "/v1/chat/completions", "completion_window": "24h"})),
    responses((status = 200, description = "The batch", body = Batch), BatchCreateErrors),
    security(("bearerAuth" = []), ("apiKey" = []))
)]
#[allow(dead_code)]
pub(super) fn create_batch() {}

#[utoipa::path(
    get, path = "/v1/batches", tag = "batch",
    summary = "The caller's batches, newest first",
    params(
        ("limit" = Option<u32>, Query, description = "Batches per page (default 20)", minimum = 1, maximum = 100),
        ("after" = Option<String>, Query, description = "Batches after the batch of this ID"),
    ),
    responses((status = 200, description = "The page", body = BatchList), BatchReadErrors),
    security(("bearerAuth" = []), ("apiKey" = []))
)]
#[allow(dead_code)]
pub(super) fn list_batches() {}

#[utoipa::path(
    get, path = "/v1/batches/{id}", tag = "batch",
    summary = "A batch: its status and counts",
    params(("id" = String, Path, description = "The batch's ID")),
    responses((status = 200, description = "The batch", body = Batch), BatchReadErrors),
    security(("bearerAuth" = []), ("apiKey" = []))
)]
#[allow(dead_code)]
pub(super) fn get_batch() {}

#[utoipa::path(
    post, path = "/v1/batches/{id}/cancel", tag = "batch",
    summary = "Cancel a batch: lines not started never run, running ones are cancelled (409 once it has ended otherwise)",
    params(("id" = String, Path, description = "The batch's ID")),
    responses((status = 200, description = "The batch, `cancelling` (or already cancelled)", body = Batch), BatchCancelErrors),
    security(("bearerAuth" = []), ("apiKey" = []))
)]
#[allow(dead_code)]
pub(super) fn cancel_batch() {}
