//! The step planner. Pure: sequence views in, plan out. No FFI, no clock,
//! no channels.
//!
//! Rule (vLLM v1's token budget): every decoding sequence gets its one decode
//! token first; the remaining prompt-token budget is then filled with chunks
//! of prefilling sequences' prompts, oldest admission first, at most
//! `max_prefill_seqs` of them per step. There is no prefill phase: a 10k
//! prompt advances `prompt_budget` tokens per step while decoders keep going.

/// What the planner needs to know about one admitted sequence.
#[derive(Debug, Clone, PartialEq)]
pub struct SeqView {
    pub key: u64,
    /// Tokens that must be in the KV cache before the next token is sampled.
    pub prompt_len: usize,
    /// Prompt tokens already computed.
    pub computed: usize,
    /// Prompt done; has a sampled token waiting to be decoded.
    pub decoding: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct StepLimits {
    /// Prompt tokens per step (decode tokens are not counted against it).
    pub prompt_budget: usize,
    pub max_prefill_seqs: usize,
    pub max_decode_seqs: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Chunk {
    pub key: u64,
    pub start: usize,
    pub len: usize,
}

impl Chunk {
    /// This chunk computes the last prompt token: sample after it.
    pub fn completes(&self, prompt_len: usize) -> bool {
        self.start + self.len == prompt_len
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    pub decode: Vec<u64>,
    pub chunks: Vec<Chunk>,
}

impl Plan {
    pub fn is_empty(&self) -> bool {
        self.decode.is_empty() && self.chunks.is_empty()
    }
    pub fn n_tokens(&self) -> usize {
        self.decode.len() + self.chunks.iter().map(|c| c.len).sum::<usize>()
    }
}

/// `seqs` in admission order (oldest first).
pub fn plan(seqs: &[SeqView], limits: &StepLimits) -> Plan {
    let mut p = Plan::default();
    for s in seqs.iter().filter(|s| s.decoding) {
        if p.decode.len() == limits.max_decode_seqs {
            break;
        }
        p.decode.push(s.key);
    }
    let mut budget = limits.prompt_budget;
    for s in seqs
        .iter()
        .filter(|s| !s.decoding && s.computed < s.prompt_len)
    {
        if budget == 0 || p.chunks.len() == limits.max_prefill_seqs {
            break;
        }
        let len = (s.prompt_len - s.computed).min(budget);
        budget -= len;
        p.chunks.push(Chunk {
            key: s.key,
            start: s.computed,
            len,
        });
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dec(key: u64) -> SeqView {
        SeqView {
            key,
            prompt_len: 5,
            computed: 5,
            decoding: true,
        }
    }
    fn pre(key: u64, prompt_len: usize, computed: usize) -> SeqView {
        SeqView {
            key,
            prompt_len,
            computed,
            decoding: false,
        }
    }
    fn lim(budget: usize, pf: usize, dc: usize) -> StepLimits {
        StepLimits {
            prompt_budget: budget,
            max_prefill_seqs: pf,
            max_decode_seqs: dc,
        }
    }

    #[test]
    fn decoders_first_then_budget_split_across_prompts() {
        let seqs = [pre(1, 100, 0), dec(2), pre(3, 30, 10), dec(4), pre(5, 8, 0)];
        let p = plan(&seqs, &lim(64, 8, 8));
        assert_eq!(p.decode, vec![2, 4]);
        assert_eq!(
            p.chunks,
            vec![Chunk {
                key: 1,
                start: 0,
                len: 64
            }]
        );
        let p = plan(
            &[pre(3, 30, 10), pre(5, 8, 0), pre(6, 100, 0)],
            &lim(64, 8, 8),
        );
        assert_eq!(
            p.chunks,
            vec![
                Chunk {
                    key: 3,
                    start: 10,
                    len: 20
                },
                Chunk {
                    key: 5,
                    start: 0,
                    len: 8
                },
                Chunk {
                    key: 6,
                    start: 0,
                    len: 36
                },
            ]
        );
        assert_eq!(p.n_tokens(), 64);
    }

    #[test]
    fn prefill_and_decode_limits_hold() {
        let seqs = [dec(1), dec(2), dec(3), pre(4, 10, 0), pre(5, 10, 0)];
        let p = plan(&seqs, &lim(100, 1, 2));
        assert_eq!(p.decode, vec![1, 2]);
        assert_eq!(p.chunks.len(), 1);
        assert_eq!(p.chunks[0].key, 4);
    }

    #[test]
    fn long_prompt_is_chunked_until_done() {
        let mut s = pre(1, 50, 0);
        let mut steps = 0;
        while s.computed < s.prompt_len {
            let p = plan(&[s.clone(), dec(9)], &lim(16, 4, 4));
            assert_eq!(p.decode, vec![9], "decoder advances every step");
            let c = &p.chunks[0];
            assert!(c.len <= 16);
            s.computed += c.len;
            steps += 1;
            assert_eq!(c.completes(50), s.computed == 50);
        }
        assert_eq!(steps, 4);
    }

    #[test]
    fn zero_budget_plans_only_decodes() {
        let p = plan(&[pre(1, 10, 0), dec(2)], &lim(0, 4, 4));
        assert_eq!(p.decode, vec![2]);
        assert!(p.chunks.is_empty());
        assert!(plan(&[], &lim(8, 1, 1)).is_empty());
    }
}
