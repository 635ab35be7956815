// [8/8] The runtime's bound for a server that prefills while it decodes:
// what one llama_decode of N decode rows with k prompt tokens riding in it
// costs, measured against the vendored llama.cpp API alone (no server, no
// sampling, no HTTP). Built by scripts/gpu-bundle.sh against the bundle's
// own libllama (the exact runtime Steward's binary runs), run on the GPU
// machine by gpu-compare.sh.
//
//   gpu-mixstep MODEL [N=64,128] [K=0,32,64,128,256,512] [REPS=20] [UNIFIED=0]
//
// Per N: a context of N + 1 sequences (per-slot KV streams unless UNIFIED,
// flash attention on, every layer on the GPU, n_batch 4096, n_ubatch 512),
// N sequences prefilled with 128 tokens; then for each k, REPS steps of one
// token on each of the N sequences (logits on every row) plus k prompt
// tokens of sequence N (logits on its last; the sequence is cleared first, so
// its chunk always starts at position 0), each step llama_decode +
// llama_synchronize. Prints a markdown row per (N, k): median and mean ms,
// output tokens/s of the N decoders, and the same relative to k = 0.
// Also the prefill rate of the N x 128 burst (prompt tokens/s).
#include "llama.h"
#include "ggml-backend.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

static std::vector<int> ints(const char * s, std::vector<int> d) {
    if (!s) return d;
    std::vector<int> v;
    std::stringstream ss(s);
    std::string x;
    while (std::getline(ss, x, ',')) v.push_back(std::atoi(x.c_str()));
    return v;
}

static double now_ms() {
    using namespace std::chrono;
    return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

static void add(llama_batch & b, llama_token t, llama_pos p, llama_seq_id s, bool logits) {
    b.token[b.n_tokens] = t;
    b.pos[b.n_tokens] = p;
    b.n_seq_id[b.n_tokens] = 1;
    b.seq_id[b.n_tokens][0] = s;
    b.logits[b.n_tokens] = logits;
    b.n_tokens++;
}

int main(int argc, char ** argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: gpu-mixstep MODEL [N,..] [K,..] [REPS] [UNIFIED]\n");
        return 2;
    }
    const std::vector<int> ns = ints(argc > 2 ? argv[2] : nullptr, {64, 128});
    const std::vector<int> ks = ints(argc > 3 ? argv[3] : nullptr, {0, 32, 64, 128, 256, 512});
    const int reps = argc > 4 ? std::atoi(argv[4]) : 20;
    const bool unified = argc > 5 && std::atoi(argv[5]) != 0;
    const int pp = 128;
    const int kmax = *std::max_element(ks.begin(), ks.end());
    llama_backend_init();
    ggml_backend_load_all();
    auto mp = llama_model_default_params();
    mp.n_gpu_layers = 999;
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (!model) {
        fprintf(stderr, "gpu-mixstep: cannot load %s\n", argv[1]);
        return 1;
    }
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    printf("| N decode rows | k prompt tokens | step median ms | step mean ms | decode tok/s (N / step) | vs k = 0 |\n");
    printf("|---|---|---|---|---|---|\n");
    for (int n : ns) {
        // Each slot holds its prompt, every step's token and the largest chunk.
        const int per_seq = std::max(pp + reps * (int) ks.size() + 64, kmax + 16);
        auto cp = llama_context_default_params();
        cp.n_seq_max = n + 1;
        cp.n_ctx = (uint32_t) ((n + 1) * ((per_seq + 255) / 256 * 256));
        cp.n_batch = 4096;
        cp.n_ubatch = 512;
        cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_ENABLED;
        cp.kv_unified = unified;
        cp.no_perf = true;
        llama_context * ctx = llama_init_from_model(model, cp);
        if (!ctx) {
            fprintf(stderr, "gpu-mixstep: no context for N = %d\n", n);
            return 1;
        }
        auto * mem = llama_get_memory(ctx);
        llama_batch b = llama_batch_init(std::max(n * pp, n + kmax) + 16, 0, 1);
        auto decode = [&](void) {
            const double t = now_ms();
            for (int i = 0; i < b.n_tokens; i += (int) cp.n_batch) {
                const int m = std::min((int) cp.n_batch, b.n_tokens - i);
                llama_batch v = {m, b.token + i, nullptr, b.pos + i, b.n_seq_id + i, b.seq_id + i, b.logits + i};
                if (llama_decode(ctx, v) != 0) {
                    fprintf(stderr, "gpu-mixstep: decode failed (N = %d)\n", n);
                    std::exit(1);
                }
            }
            llama_synchronize(ctx);
            return now_ms() - t;
        };
        // Prefill N prompts of 128 tokens (tokens vary so no two rows match).
        b.n_tokens = 0;
        for (int s = 0; s < n; ++s)
            for (int i = 0; i < pp; ++i) add(b, (s * 131 + i * 7) % n_vocab, i, s, i == pp - 1);
        decode();  // warm-up (graph allocation); measured again below
        llama_memory_clear(mem, true);
        const double t_pp = decode();
        fprintf(stderr, "N = %d: prefill of %d x %d tokens %.1f ms (%.0f prompt tokens/s)\n", n, n, pp, t_pp,
                n * pp / t_pp * 1e3);
        int pos = pp;
        double base = 0;
        for (int k : ks) {
            std::vector<double> t;
            for (int r = -2; r < reps; ++r) {  // two unmeasured warm-up steps per shape
                llama_memory_seq_rm(mem, n, -1, -1);
                b.n_tokens = 0;
                for (int s = 0; s < n; ++s) add(b, (s * 17 + pos) % n_vocab, pos, s, true);
                for (int i = 0; i < k; ++i) add(b, (i * 13 + 5) % n_vocab, i, n, i == k - 1);
                const double ms = decode();
                pos++;
                if (r >= 0) t.push_back(ms);
            }
            std::vector<double> s = t;
            std::sort(s.begin(), s.end());
            double mean = 0;
            for (double x : t) mean += x / t.size();
            const double med = s[s.size() / 2];
            if (k == 0) base = med;
            printf("| %d | %d | %.2f | %.2f | %.0f | %.2f× |\n", n, k, med, mean, n / med * 1e3, base > 0 ? base / med : 1.0);
            fflush(stdout);
        }
        llama_batch_free(b);
        llama_free(ctx);
    }
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
