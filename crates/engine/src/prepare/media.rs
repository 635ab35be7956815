//! ① prepare — a prompt with media: the rendered text is cut at the media
//! markers the server put where each media part was, the text between is
//! tokenized as any prompt is, and each marker becomes the projector's
//! pieces (its own wrapping tokens, then embedding spans whose prompt
//! positions hold placeholder ids keyed by the media's hash).

use std::sync::Arc;

use super::PrepareError;
use crate::request::{placeholder, MediaSpan};
use crate::runtime::mtmd::Piece;
use crate::runtime::TokenId;

/// What a media part is in the text a template renders (libmtmd's
/// default marker, which llama-server uses too).
pub const MEDIA_MARKER: &str = "<__media__>";

/// A prompt assembled from text pieces and encoded media.
#[derive(Debug, Clone, Default)]
pub struct Assembled {
    pub tokens: Vec<TokenId>,
    pub media: Vec<MediaSpan>,
}

/// The text around the markers: `n_media + 1` pieces, or an error when
/// the text holds another number of markers (a client's text that spells
/// the marker).
pub fn split_text(text: &str, n_media: usize) -> Result<Vec<&str>, PrepareError> {
    let pieces: Vec<&str> = text.split(MEDIA_MARKER).collect();
    if pieces.len() != n_media + 1 {
        return Err(marker_count(pieces.len() - 1, n_media));
    }
    Ok(pieces)
}

/// The text held `found` markers for `n_media` media parts.
pub fn marker_count(found: usize, n_media: usize) -> PrepareError {
    PrepareError::Media(format!(
        "the prompt text holds {found} media markers for {n_media} media parts: `{MEDIA_MARKER}` is reserved and may not appear in text"
    ))
}

/// One encoded media item: its hash, pieces and request part.
pub type EncodedItem = ([u8; 32], Arc<Vec<Piece>>, String);

/// Join tokenized text pieces and encoded media, in order
/// (`texts.len() == media.len() + 1`). `max_span`: rows one span may have
/// (the runtime's ubatch: a non-causal span is decoded whole).
pub fn assemble(
    texts: Vec<Vec<TokenId>>,
    media: &[EncodedItem],
    max_span: usize,
) -> Result<Assembled, PrepareError> {
    let mut out = Assembled::default();
    let mut texts = texts.into_iter();
    out.tokens.extend(texts.next().unwrap_or_default());
    for (hash, pieces, label) in media {
        for p in pieces.iter() {
            match p {
                Piece::Text(t) => out.tokens.extend_from_slice(t),
                Piece::Embd {
                    n_tokens,
                    n_pos,
                    non_causal,
                    embd,
                } => {
                    if *n_pos != *n_tokens {
                        return Err(PrepareError::Media(format!(
                            "{label}: the projector places it by {n_pos} positions for {n_tokens} rows, which this server does not support"
                        )));
                    }
                    if *n_tokens > max_span {
                        return Err(PrepareError::Media(format!(
                            "{label}: it takes {n_tokens} embedding rows; this server decodes at most {max_span} at once (raise --ubatch-size)"
                        )));
                    }
                    let start = out.tokens.len();
                    out.tokens
                        .extend((0..*n_tokens).map(|i| placeholder(hash, i)));
                    out.media.push(MediaSpan {
                        start,
                        len: *n_tokens,
                        hash: *hash,
                        embd: Arc::from(embd.as_slice()),
                        non_causal: *non_causal,
                    });
                }
            }
        }
        out.tokens.extend(texts.next().unwrap_or_default());
    }
    if out
        .media
        .last()
        .is_some_and(|m| m.start + m.len == out.tokens.len())
    {
        return Err(PrepareError::Media(
            "the prompt ends with media; a prompt needs text after its last media part".into(),
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(rows: usize) -> Arc<Vec<Piece>> {
        Arc::new(vec![
            Piece::Text(vec![7]),
            Piece::Embd {
                n_tokens: rows,
                n_pos: rows,
                non_causal: true,
                embd: vec![0.5; rows * 2],
            },
            Piece::Text(vec![8]),
        ])
    }

    #[test]
    fn media_become_placeholder_spans_between_their_text() {
        let (a, b) = ([1u8; 32], [2u8; 32]);
        let texts = vec![vec![1, 2], vec![3], vec![4]];
        let media = [(a, span(3), "x".into()), (b, span(2), "y".into())];
        let p = assemble(texts, &media, 8).unwrap();
        assert_eq!(p.media.len(), 2);
        assert_eq!((p.media[0].start, p.media[0].len), (3, 3));
        assert_eq!((p.media[1].start, p.media[1].len), (9, 2));
        assert_eq!(&p.tokens[..3], &[1, 2, 7]);
        assert_eq!(p.tokens[6..9], [8, 3, 7]);
        assert!(p.tokens[3..6].iter().all(|&t| t < 0));
        // Same picture, same ids; another picture, another first id.
        assert_eq!(p.tokens[3], placeholder(&a, 0));
        assert_ne!(placeholder(&a, 0), placeholder(&b, 0));
        assert_ne!(placeholder(&a, 0), placeholder(&a, 1));
    }

    #[test]
    fn a_span_past_the_ubatch_a_marker_in_text_and_media_last_are_errors() {
        let m = [([1u8; 32], span(9), "messages[0].content[1]".into())];
        let e = assemble(vec![vec![1], vec![2]], &m, 8).unwrap_err();
        assert!(e.to_string().contains("messages[0].content[1]"), "{e}");
        assert!(split_text("a <__media__> b <__media__>", 1).is_err());
        assert_eq!(split_text("a<__media__>b", 1).unwrap(), vec!["a", "b"]);
        let bare = Arc::new(vec![Piece::Embd {
            n_tokens: 2,
            n_pos: 2,
            non_causal: false,
            embd: vec![0.0; 4],
        }]);
        let e = assemble(vec![vec![1], vec![]], &[([3; 32], bare, "z".into())], 8).unwrap_err();
        assert!(e.to_string().contains("ends with media"), "{e}");
    }
}
