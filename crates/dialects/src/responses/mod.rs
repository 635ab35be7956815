//! The OpenAI Responses API (`/v1/responses`), served by translation:
//! [`to_chat`] turns a request (and the stored response it continues) into
//! a chat-completions body; [`response`] and [`ResponseStream`] give the
//! answer back as a Response object or its stream of events; [`Store`]
//! keeps responses for `previous_response_id`, `GET` and `DELETE`.

use serde_json::{json, Value};

mod items;
mod output;
mod request;
mod store;

pub use output::{error_body, response, ResponseStream};
pub use request::{to_chat, Echo, RTranslated};
pub use store::{Store, StoreFull, Stored};

/// The conversation to store with `response`: the previous response's,
/// this request's input items, and the response's output items.
pub fn conversation(previous: Option<&Stored>, t: &RTranslated, response: &Value) -> Vec<Value> {
    let mut c = previous.map(|p| p.conversation.clone()).unwrap_or_default();
    c.extend(t.input_items.iter().cloned());
    if let Some(out) = response["output"].as_array() {
        c.extend(out.iter().cloned());
    }
    c
}

/// `DELETE /v1/responses/{id}`'s answer.
pub fn deleted(id: &str) -> Value {
    json!({"id": id, "object": "response", "deleted": true})
}

/// The input items of a stored response (its conversation less its own
/// output), oldest first.
fn inputs(stored: &Stored) -> &[Value] {
    let outputs = stored.response["output"].as_array().map_or(0, Vec::len);
    let n = stored.conversation.len().saturating_sub(outputs);
    &stored.conversation[..n]
}

fn list(data: Vec<Value>, has_more: bool) -> Value {
    let first = data.first().map_or(Value::Null, |i| i["id"].clone());
    let last = data.last().map_or(Value::Null, |i| i["id"].clone());
    json!({"object": "list", "data": data, "first_id": first, "last_id": last,
           "has_more": has_more})
}

/// `GET /v1/responses/{id}/input_items`: every input item, oldest first.
pub fn input_items(stored: &Stored) -> Value {
    list(inputs(stored).to_vec(), false)
}

/// A page of input items: `GET /v1/responses/{id}/input_items?order=…&
/// after=…&limit=…`. The API's defaults are `desc` and 20 (see
/// [`ItemsQuery::default`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemsQuery {
    /// Newest first (`order=desc`).
    pub desc: bool,
    /// Items after (in that order) the item of this ID.
    pub after: Option<String>,
    /// 1 to 100.
    pub limit: usize,
}

impl Default for ItemsQuery {
    fn default() -> Self {
        ItemsQuery {
            desc: true,
            after: None,
            limit: 20,
        }
    }
}

/// A page of a stored response's input items.
pub fn input_items_page(stored: &Stored, q: &ItemsQuery) -> Value {
    let mut items: Vec<&Value> = inputs(stored).iter().collect();
    if q.desc {
        items.reverse();
    }
    let start = match &q.after {
        None => 0,
        Some(a) => items
            .iter()
            .position(|i| i["id"].as_str() == Some(a))
            .map_or(items.len(), |p| p + 1),
    };
    let rest = &items[start.min(items.len())..];
    let limit = q.limit.clamp(1, 100);
    let page: Vec<Value> = rest.iter().take(limit).map(|v| (*v).clone()).collect();
    list(page, rest.len() > limit)
}

#[cfg(test)]
mod tests_output;
#[cfg(test)]
mod tests_request;
#[cfg(test)]
mod tests_store;
