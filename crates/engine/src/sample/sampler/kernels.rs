//! The sampler's row kernels: the passes over a row of logits that
//! vectorize (maximum, weights with a polynomial exp, chunk sums), the
//! draw, and the cuts (top-k by block maxima, top-p by a band of values and
//! a weighted quickselect). Pure; see `sampler.rs` for the order and cost.

use std::cmp::Ordering;

use crate::runtime::TokenId;

/// Lanes of the passes that must vectorize.
pub(super) const L: usize = 16;
/// Tokens per partial sum of the weights (the draw's first level).
pub(super) const CHUNK: usize = 256;
/// Narrowing stops once the band holds at most this many tokens.
pub(super) const BAND: usize = 1024;

/// a * b + c, fused where the target has FMA (without it `mul_add` is a
/// call to libm).
#[inline(always)]
pub(super) fn fma(a: f32, b: f32, c: f32) -> f32 {
    if cfg!(target_feature = "fma") {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}

/// exp(x), relative error under 1e-7 (Cephes' expf polynomial after
/// x = n ln 2 + r), exactly 0 for x ≤ -87, -inf and NaN. Branch-free, so
/// loops over it vectorize.
#[inline(always)]
pub(crate) fn fast_exp(x: f32) -> f32 {
    let ok = x > -87.0;
    let x = if ok { x } else { -87.0 };
    let x = if x < 88.0 { x } else { 88.0 };
    // Adding 1.5 * 2^23 rounds x log2(e) to the integer n, kept in the low
    // mantissa bits; subtracting it back gives n as a float.
    let t = fma(x, std::f32::consts::LOG2_E, 12_582_912.0);
    let n = t - 12_582_912.0;
    let r = fma(n, 2.121_944_4e-4, fma(n, -0.693_359_4, x));
    let p = fma(fma(1.987_569_1e-4, r, 1.398_199_9e-3), r, 8.333_452e-3);
    let p = fma(fma(fma(p, r, 4.166_579_6e-2), r, 1.666_666_5e-1), r, 0.5);
    let p = fma(p, r * r, r) + 1.0;
    let pow2 = f32::from_bits(t.to_bits().wrapping_sub(0x4B40_0000 - 127) << 23);
    if ok {
        p * pow2
    } else {
        0.0
    }
}

/// The largest value, over 16 lanes with compare-select (NaN never wins;
/// -inf for an empty or all-NaN row).
#[inline]
pub(super) fn lane_max(l: &[f32]) -> f32 {
    let pick = |m: f32, x: f32| if x > m { x } else { m };
    let (blocks, rest) = l.as_chunks::<L>();
    let mut lanes = [f32::NEG_INFINITY; L];
    for c in blocks {
        for (m, &x) in lanes.iter_mut().zip(c) {
            *m = pick(*m, x);
        }
    }
    // Halving, so that it vectorizes too (block maxima are many).
    let h: [f32; 8] = std::array::from_fn(|i| pick(lanes[i], lanes[i + 8]));
    let h: [f32; 4] = std::array::from_fn(|i| pick(h[i], h[i + 4]));
    let m = pick(pick(h[0], h[2]), pick(h[1], h[3]));
    rest.iter().fold(m, |m, &x| pick(m, x))
}

/// Index of the largest logit, the lowest index on ties (NaN never wins).
/// Two passes: the maximum over 16 lanes (vectorized), then its first
/// position (a per-element branch on the index does not vectorize; this is
/// the whole of greedy sampling, every token).
pub fn argmax(l: &[f32]) -> TokenId {
    let max = lane_max(l);
    l.iter().position(|&x| x == max).unwrap_or(0) as TokenId
}

/// Log-softmax of `logits` at `token`, and the `top_n` most likely tokens
/// (by logit, then lower id; never NaN, -inf only to fill the list).
pub fn logprob_of(
    logits: &[f32],
    token: TokenId,
    top_n: usize,
) -> crate::deliver::stream::TokenLogprob {
    let max = lane_max(logits);
    let mut sum = 0f64;
    for c in logits.chunks(CHUNK).filter(|_| max.is_finite()) {
        let (blocks, rest) = c.as_chunks::<L>();
        let mut acc = [0f32; L];
        for b in blocks {
            for (a, &x) in acc.iter_mut().zip(b) {
                *a += fast_exp(x - max);
            }
        }
        let rest: f32 = rest.iter().map(|&x| fast_exp(x - max)).sum();
        sum += f64::from(rest + acc.iter().sum::<f32>());
    }
    let lse = if max.is_finite() {
        max + sum.ln() as f32
    } else {
        max
    };
    let lp = |t: TokenId| {
        let l = usize::try_from(t).ok().and_then(|i| logits.get(i));
        l.map_or(f32::NEG_INFINITY, |&l| l - lse)
    };
    let n = top_n.min(logits.len());
    let (mut top, mut maxima) = (Vec::new(), Vec::new());
    if n > 0 {
        // +inf (a broken row) ranks as the largest finite value.
        let capped: Vec<f32>;
        let row = if max == f32::INFINITY {
            let cap = |x: f32| if x == f32::INFINITY { f32::MAX } else { x };
            capped = logits.iter().map(|&x| cap(x)).collect();
            &capped[..]
        } else {
            logits
        };
        top_set(row, n, &mut maxima, &mut top);
        top.sort_unstable_by(order);
    }
    // Only tokens that could have been chosen: a grammar's masked tokens
    // (-inf) are not alternatives (their logprob would be null on the wire).
    let ids = top
        .iter()
        .filter(|c| c.v > f32::NEG_INFINITY)
        .map(|c| c.id as usize);
    crate::deliver::stream::TokenLogprob {
        token,
        logprob: lp(token),
        top: ids.map(|i| (i as TokenId, lp(i as TokenId))).collect(),
    }
}

/// A token in a gathered band: id, value, weight.
#[derive(Debug, Clone, Copy)]
pub(super) struct Cand {
    pub(super) id: u32,
    pub(super) v: f32,
    pub(super) w: f32,
}

impl Cand {
    pub(super) fn at(id: usize, v: f32) -> Cand {
        Cand {
            id: id as u32,
            v,
            w: 0.0,
        }
    }

    pub(super) fn weighed(self, w: f32) -> Cand {
        Cand { w, ..self }
    }
}

/// The sampling order: value descending, then id ascending.
pub(super) fn order(a: &Cand, b: &Cand) -> Ordering {
    let by_v = b.v.partial_cmp(&a.v).unwrap_or(Ordering::Equal);
    by_v.then(a.id.cmp(&b.id))
}

/// A cut in the order: keeps the tokens up to and including (`v`, `id`).
#[derive(Debug, Clone, Copy)]
pub(super) struct Cut {
    pub(super) v: f32,
    pub(super) id: u32,
}

impl From<Cand> for Cut {
    fn from(c: Cand) -> Cut {
        Cut { v: c.v, id: c.id }
    }
}

impl Cut {
    pub(super) fn keeps(self, id: u32, v: f32) -> bool {
        v > self.v || (v == self.v && id <= self.id)
    }

    pub(super) fn min(self, o: Cut) -> Cut {
        if o.keeps(self.id, self.v) {
            self
        } else {
            o
        }
    }
}

/// Weights of a row, their sums per CHUNK and their total.
#[derive(Debug, Default)]
pub(super) struct Weights {
    pub(super) w: Vec<f32>,
    pub(super) sums: Vec<f32>,
    pub(super) total: f64,
}

/// w = exp((v - max) / T) for v ≥ `floor`, else 0, with the sums.
#[inline(never)]
pub(super) fn weights(v: &[f32], (max, inv_t, floor): (f32, f32, f32), o: &mut Weights) {
    o.w.resize(v.len(), 0.0);
    o.sums.clear();
    let weight = |x: f32| {
        if x >= floor {
            fast_exp((x - max) * inv_t)
        } else {
            0.0
        }
    };
    for (vc, wc) in v.chunks(CHUNK).zip(o.w.chunks_mut(CHUNK)) {
        let ((vb, vr), (wb, wr)) = (vc.as_chunks::<L>(), wc.as_chunks_mut::<L>());
        let mut acc = [0f32; L];
        for (a, b) in vb.iter().zip(wb) {
            for i in 0..L {
                b[i] = weight(a[i]);
                acc[i] += b[i];
            }
        }
        for (a, b) in vr.iter().zip(wr) {
            *b = weight(*a);
            acc[0] += *b;
        }
        o.sums.push(acc.iter().sum());
    }
    o.total = o.sums.iter().map(|&s| f64::from(s)).sum();
}

/// Keeps in the sums and total only the weights of the tokens `cut` keeps.
#[inline(never)]
pub(super) fn cut_sums(v: &[f32], cut: Cut, o: &mut Weights) {
    o.sums.clear();
    for (vc, wc) in v.chunks(CHUNK).zip(o.w.chunks(CHUNK)) {
        let ((vb, vr), (wb, wr)) = (vc.as_chunks::<L>(), wc.as_chunks::<L>());
        let mut acc = [0f32; L];
        for (a, b) in vb.iter().zip(wb) {
            // Weight times 0 or 1: a select of it did not vectorize here.
            for (m, (&x, &y)) in acc.iter_mut().zip(a.iter().zip(b)) {
                *m += y * if x >= cut.v { 1.0 } else { 0.0 };
            }
        }
        let rest = vr.iter().zip(wr).filter(|(&x, _)| x >= cut.v);
        o.sums
            .push(acc.iter().sum::<f32>() + rest.map(|(_, &y)| y).sum::<f32>());
    }
    // Tokens tied with the cut's value and after its id are not kept (rare):
    // their chunks are summed again, token by token.
    if v.iter().filter(|&&x| x == cut.v).count() > 1 {
        let ties = (cut.id as usize + 1..v.len()).filter(|&i| v[i] == cut.v);
        let mut chunks: Vec<usize> = ties.map(|i| i / CHUNK).collect();
        chunks.dedup();
        for c in chunks {
            let kept =
                (c * CHUNK..v.len().min(c * CHUNK + CHUNK)).filter(|&i| cut.keeps(i as u32, v[i]));
            o.sums[c] = kept.map(|i| o.w[i]).sum();
        }
    }
    o.total = o.sums.iter().map(|&s| f64::from(s)).sum();
}

/// The token at `u` of the total of the weights `cut` keeps: the chunk by
/// its sum, then the token inside it. Never a token of weight 0.
pub(super) fn draw_full(v: &[f32], o: &Weights, cut: Option<Cut>, u: f64) -> Option<usize> {
    let mut r = u * o.total;
    let mut at = None;
    for (c, &s) in o.sums.iter().enumerate().filter(|(_, &s)| s > 0.0) {
        at = Some(c);
        if r < f64::from(s) {
            break;
        }
        r -= f64::from(s);
    }
    let start = at? * CHUNK;
    let keep = |i: usize| cut.is_none_or(|c| c.keeps(i as u32, v[i]));
    let ws = (start..v.len().min(start + CHUNK)).map(|i| if keep(i) { o.w[i] } else { 0.0 });
    draw_in(ws, r).map(|i| start + i)
}

/// The first weight at which `r` runs out, or the last positive weight.
pub(super) fn draw_in(w: impl Iterator<Item = f32>, mut r: f64) -> Option<usize> {
    let mut last = None;
    for (i, x) in w.enumerate().filter(|&(_, x)| x > 0.0) {
        last = Some(i);
        if r < f64::from(x) {
            break;
        }
        r -= f64::from(x);
    }
    last
}

/// Adds, per lane, the count and weight of the tokens with t ≤ v < hi.
/// f32 lanes and a 0/1 factor: integer lanes let LLVM vectorize across
/// blocks (with gathers), selects can become branches.
#[inline(always)]
pub(super) fn band(
    a: &[f32; L],
    b: &[f32; L],
    t: f32,
    hi: f32,
    c: &mut [f32; L],
    m: &mut [f32; L],
) {
    for ((c, m), (&x, &y)) in c.iter_mut().zip(m.iter_mut()).zip(a.iter().zip(b)) {
        let k = if (x >= t) & (x < hi) { 1.0 } else { 0.0 };
        *c += k;
        *m += k * y;
    }
}

/// Count and weight of the tokens with t[j] ≤ v < hi, per j.
#[inline(never)]
pub(super) fn ladder(v: &[f32], w: &[f32], hi: f32, t: &[f32; 8]) -> ([usize; 8], [f64; 8]) {
    let (mut cnt, mut mass) = ([[0f32; L]; 8], [[0f32; L]; 8]);
    let ((vb, vr), (wb, wr)) = (v.as_chunks::<L>(), w.as_chunks::<L>());
    for (a, b) in vb.iter().zip(wb) {
        // Spelled out: a loop over the thresholds vectorizes the wrong way.
        let ([c0, c1, c2, c3, c4, c5, c6, c7], [m0, m1, m2, m3, m4, m5, m6, m7]) =
            (&mut cnt, &mut mass);
        band(a, b, t[0], hi, c0, m0);
        band(a, b, t[1], hi, c1, m1);
        band(a, b, t[2], hi, c2, m2);
        band(a, b, t[3], hi, c3, m3);
        band(a, b, t[4], hi, c4, m4);
        band(a, b, t[5], hi, c5, m5);
        band(a, b, t[6], hi, c6, m6);
        band(a, b, t[7], hi, c7, m7);
    }
    for (&x, &y) in vr.iter().zip(wr) {
        for j in (0..8).filter(|&j| x >= t[j] && x < hi) {
            (cnt[j][0], mass[j][0]) = (cnt[j][0] + 1.0, mass[j][0] + y);
        }
    }
    let c = cnt.map(|l| l.iter().map(|&x| x as usize).sum::<usize>());
    (c, mass.map(|l| l.iter().map(|&x| f64::from(x)).sum()))
}

/// A row, its weights and its maximum.
pub(super) type Row<'a> = (&'a [f32], &'a [f32], f32);

/// Block maxima, with their blocks.
pub(super) type Maxima = Vec<(f32, u32)>;

/// Tokens with lo ≤ v < hi, `n` of them; `above` is the weight of the
/// tokens with v ≥ hi.
#[derive(Debug, Clone, Copy)]
pub(super) struct Band {
    pub(super) lo: f32,
    pub(super) hi: f32,
    pub(super) above: f64,
    pub(super) n: usize,
}

/// The band of values holding the token at which the running weight, in
/// order, first reaches `target`: thresholds `first` (descending, from the
/// maximum) first, further below by powers of 16 while none is enough, then
/// eighths of the band, until it holds at most BAND tokens or stops
/// shrinking (ties). All finite tokens below `hi` when out of reach.
pub(super) fn narrow(v: &[f32], w: &[f32], first: [f32; 8], scale: f32, target: f64) -> Band {
    let mut b = Band {
        lo: f32::MIN,
        hi: f32::INFINITY,
        above: 0.0,
        n: usize::MAX,
    };
    let (max, mut open) = (first[0], true);
    let mut d = ((max - first[7]) / scale).max(32.0);
    for pass in 0..16 {
        let t: [f32; 8] = std::array::from_fn(|j| {
            let x = match (open, pass) {
                (true, 0) => first[j],
                (true, _) => max - scale * d * 16f32.powi(j as i32 + 1),
                (false, _) if j == 7 => b.lo,
                (false, _) => b.hi - (b.hi - b.lo) * ((j + 1) as f32 / 8.0),
            };
            x.max(f32::MIN)
        });
        let (c, q) = ladder(v, w, b.hi, &t);
        let Some(j) = (0..8).find(|&j| b.above + q[j] >= target) else {
            if open && t[7] > f32::MIN {
                (b.above, b.hi) = (b.above + q[7], t[7]);
                d = if pass == 0 { d } else { d * 16f32.powi(8) };
                continue;
            }
            if open {
                (b.lo, b.n) = (f32::MIN, c[7]);
            }
            return b;
        };
        let (pq, pc, hi) = if j == 0 {
            (0.0, 0, b.hi)
        } else {
            (q[j - 1], c[j - 1], t[j - 1])
        };
        let nb = Band {
            lo: t[j],
            hi,
            above: b.above + pq,
            n: c[j] - pc,
        };
        let stuck = (!open && nb.lo == b.lo && nb.hi == b.hi) || hi == f32::INFINITY;
        (b, open) = (nb, false);
        if b.n <= BAND || stuck {
            break;
        }
    }
    b
}

/// First thresholds for `narrow`, and how many first tokens in order
/// likely hold `target`: max - scale * (0, 0.5, 1, 2 .. 32) alone on short
/// rows; on long ones three of those (for a few dominant tokens) and five
/// values of a sorted sample of 512 tokens around the place where the
/// weight summed from the sample's bottom reaches `total - target`.
pub(super) fn seeds(
    (v, w, max): Row,
    scale: f32,
    (target, total): (f64, f64),
    samp: &mut Vec<Cand>,
) -> ([f32; 8], Option<usize>) {
    let mut t = [0.0, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0].map(|d| max - scale * d);
    let stride = v.len() / 512;
    samp.clear();
    if stride >= 8 {
        let pick = (0..v.len()).step_by(stride).filter(|&i| v[i].is_finite());
        samp.extend(pick.map(|i| Cand::at(i, v[i]).weighed(w[i])));
    }
    if samp.is_empty() {
        return (t, None);
    }
    samp.sort_unstable_by(order);
    let (mut r, mut excl) = (samp.len(), total - target);
    while r > 1 && excl > 0.0 {
        r -= 1;
        excl -= stride as f64 * f64::from(samp[r].w);
    }
    (t[1], t[2]) = (t[2], t[4]);
    for (k, d) in [-12, -4, 0, 4, 12].into_iter().enumerate() {
        t[3 + k] = samp[(r as isize + d).clamp(0, samp.len() as isize - 1) as usize].v;
    }
    t.sort_unstable_by(|a, b| b.total_cmp(a));
    (t, Some((r + 3) * stride))
}

/// Appends the tokens with lo ≤ v < hi, in id order (weight left 0).
pub(super) fn gather(v: &[f32], lo: f32, hi: f32, out: &mut Vec<Cand>) {
    let (vb, vr) = v.as_chunks::<64>();
    for (bi, a) in vb.iter().enumerate() {
        gather_block(a, bi * 64, lo, hi, out);
    }
    let rest = vr.iter().enumerate().filter(|(_, &x)| x >= lo && x < hi);
    out.extend(rest.map(|(i, &x)| Cand::at(vb.len() * 64 + i, x)));
}

/// Flags as bytes (a vector compare and pack), tested 8 at a time: a bit
/// mask built from the lanes would reduce horizontally.
#[inline(always)]
pub(super) fn gather_block<const B: usize>(
    a: &[f32; B],
    start: usize,
    lo: f32,
    hi: f32,
    out: &mut Vec<Cand>,
) {
    let mut f = [0u8; B];
    for (f, &x) in f.iter_mut().zip(a) {
        *f = u8::from((x >= lo) & (x < hi));
    }
    for (k, word) in f.as_chunks::<8>().0.iter().enumerate() {
        let mut m = u64::from_le_bytes(*word);
        while m != 0 {
            let i = k * 8 + m.trailing_zeros() as usize / 8;
            out.push(Cand::at(start + i, a[i]));
            m &= m - 1;
        }
    }
}

/// The `k` (≥ 1) first finite tokens in order (all finite ones if fewer),
/// in no particular order; `v` holds no +inf. The k-th largest maximum of
/// blocks of 64 (or 16) tokens bounds the k-th largest value from below:
/// the tokens at or above it, gathered from the blocks that reach it, are
/// at least k and usually few more.
pub(super) fn top_set(v: &[f32], k: usize, maxima: &mut Maxima, out: &mut Vec<Cand>) {
    out.clear();
    match v.len() / k {
        64.. => top_set_in::<64>(v, k, maxima, out),
        16.. => top_set_in::<16>(v, k, maxima, out),
        _ => gather(v, f32::MIN, f32::INFINITY, out),
    }
    if out.len() > k {
        out.select_nth_unstable_by(k - 1, order);
        out.truncate(k);
    }
}

pub(super) fn top_set_in<const B: usize>(
    v: &[f32],
    k: usize,
    maxima: &mut Maxima,
    out: &mut Vec<Cand>,
) {
    let (vb, vr) = v.as_chunks::<B>();
    maxima.clear();
    maxima.extend(vb.iter().enumerate().map(|(i, b)| (lane_max(b), i as u32)));
    maxima.select_nth_unstable_by(k - 1, |a, b| b.0.total_cmp(&a.0));
    let lo = maxima[k - 1].0.max(f32::MIN);
    for &(_, b) in maxima.iter().filter(|m| m.0 >= lo) {
        gather_block(&vb[b as usize], b as usize * B, lo, f32::INFINITY, out);
    }
    let rest = vr
        .iter()
        .enumerate()
        .filter(|(_, &x)| x >= lo && x < f32::INFINITY);
    out.extend(rest.map(|(i, &x)| Cand::at(vb.len() * B + i, x)));
}

/// Position of the token, in order, at which the running weight of `c`
/// first reaches `need` (the last token if it never does), with the tokens
/// before it in order moved in front of it. Quickselect on weight: O(n)
/// expected; only the last ≤ 32 tokens are sorted.
pub(super) fn select_prefix(c: &mut [Cand], mut need: f64) -> usize {
    let (mut lo, mut hi) = (0, c.len());
    while hi - lo > 32 {
        let mid = lo + (hi - lo) / 2;
        c[lo..hi].select_nth_unstable_by(mid - lo, order);
        let left: f64 = c[lo..mid].iter().map(|x| f64::from(x.w)).sum();
        if left >= need {
            hi = mid;
            continue;
        }
        need -= left + f64::from(c[mid].w);
        if need <= 0.0 {
            return mid;
        }
        lo = mid + 1;
    }
    c[lo..hi].sort_unstable_by(order);
    for (i, x) in c.iter().enumerate().take(hi).skip(lo) {
        need -= f64::from(x.w);
        if need <= 0.0 {
            return i;
        }
    }
    hi.saturating_sub(1)
}

/// The top-p cut over the weights `w` of the row `v` (maximum `max`).
pub(super) fn top_p_cut(
    (v, w, max): Row,
    t: f32,
    (target, total): (f64, f64),
    cand: &mut Vec<Cand>,
    maxima: &mut Maxima,
) -> Option<Cut> {
    let (first, likely) = seeds((v, w, max), t, (target, total), cand);
    let cut = |c: &mut Vec<Cand>, need: f64| {
        c.iter_mut().for_each(|c| c.w = w[c.id as usize]);
        let i = select_prefix(c, need);
        Cut::from(c[i])
    };
    // Few tokens hold the mass (the usual case): the first `likely` ones,
    // when they do hold it.
    if let Some(k) = likely.filter(|&k| k <= 1024) {
        top_set(v, k, maxima, cand);
        let mass: f64 = cand.iter().map(|c| f64::from(w[c.id as usize])).sum();
        if mass >= target {
            return Some(cut(cand, target));
        }
    }
    let b = narrow(v, w, first, t, target);
    cand.clear();
    gather(v, b.lo, b.hi, cand);
    (!cand.is_empty()).then(|| cut(cand, target - b.above))
}

/// What survives truncation: one token, the tokens of the row (the
/// penalized one when `Scratch::penalized`) up to a cut, or the candidates.
pub(super) enum Plan {
    One(usize),
    Full(Option<Cut>),
    List,
}
