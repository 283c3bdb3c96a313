// Runs the per-item functions of runtime/collc_codecs.cuh on the CPU, item by item,
// exactly as the kernels call them, with a sequential scan in place of the scan kernels.
// tests/test_codecs.py compares the results with the numpy references bit for bit.
//
// Build: c++ -std=c++17 -O2 -ffp-contract=off -fno-strict-aliasing -I runtime tests/cuda/codecs_host.cpp
// Usage: codecs_host OP N [PARAMS...] IN... OUT    (floats as their hex bit patterns)
//   ebq_enc N INV2EB in.f32 out        ebq_dec N STEP in out.f32
//   ebq_reduce N STEP INV2EB in local.f32 out
//   fwq_enc N BITS BLOCK in.f32 out    fwq_dec N BITS BLOCK in out.f32
//   hq_enc N INV2EB in.f32 out         hq_dec N STEP in out.f32         hq_add N a b out
//   fp16_enc|bf16_enc N in.f32 out     fp16_dec|bf16_dec N in out.f32
//   lossless_enc N in.f32 out          lossless_dec N in out.f32
// Prints "ok", or "bad INDEX" when a value is refused (then OUT is not written).
#include <collc_codecs.cuh>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

std::vector<collc_u8> read_file(const char* path) {
    std::vector<collc_u8> data;
    FILE* f = std::fopen(path, "rb");
    if (!f) {
        std::fprintf(stderr, "cannot open %s\n", path);
        std::exit(2);
    }
    collc_u8 buf[65536];
    size_t got;
    while ((got = std::fread(buf, 1, sizeof buf, f)) > 0) data.insert(data.end(), buf, buf + got);
    std::fclose(f);
    data.resize(data.size() + 8);  // slack so empty inputs still have an address; never read
    return data;
}

void write_file(const char* path, const void* data, size_t size) {
    FILE* f = std::fopen(path, "wb");
    if (!f || (size && std::fwrite(data, 1, size, f) != size)) {
        std::fprintf(stderr, "cannot write %s\n", path);
        std::exit(2);
    }
    std::fclose(f);
}

float hex_float(const char* text) { return collc_u2f((collc_u32)std::strtoul(text, nullptr, 16)); }

// What the scan kernels compute: an exclusive prefix sum, in place.
void exclusive_scan(std::vector<collc_u64>& v) {
    collc_u64 run = 0;
    for (auto& x : v) {
        collc_u64 s = x;
        x = run;
        run += s;
    }
}

int report(collc_u64 bad) {
    if (bad != COLLC_NONE) {
        std::printf("bad %llu\n", bad);
        return 1;
    }
    std::printf("ok\n");
    return 0;
}

collc_u64 min_bad(collc_u64 a, collc_u64 b) { return a < b ? a : b; }

template <typename T>
std::vector<T> as(const std::vector<collc_u8>& bytes) {
    std::vector<T> out(bytes.size() / sizeof(T) + 1);
    std::memcpy(out.data(), bytes.data(), bytes.size() - bytes.size() % sizeof(T));
    return out;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 4) {
        std::fprintf(stderr, "usage: codecs_host OP N ARGS...\n");
        return 2;
    }
    const std::string op = argv[1];
    const collc_u64 n = std::strtoull(argv[2], nullptr, 10);
    const char* out_path = argv[argc - 1];
    const collc_u64 nb = collc_div_up(n, 32);
    collc_u64 bad = COLLC_NONE;

    if (op == "ebq_enc" || op == "ebq_reduce") {
        const bool reduce = op == "ebq_reduce";
        const float step = reduce ? hex_float(argv[3]) : 0.0f;
        const float inv2eb = hex_float(argv[reduce ? 4 : 3]);
        std::vector<float> x, local;
        std::vector<collc_u8> in;
        std::vector<collc_u64> in_offsets(nb + 1);
        if (reduce) {
            in = read_file(argv[5]);
            local = as<float>(read_file(argv[6]));
            for (collc_u64 b = 0; b <= nb; ++b) collc_ebq_decode_sizes_one(in.data(), n, in_offsets.data(), b);
            exclusive_scan(in_offsets);
        } else {
            x = as<float>(read_file(argv[4]));
        }
        std::vector<collc_u8> payload(collc_align4(nb) + nb * 4 * (1 + COLLC_EBQ_MAX_BITS) + 8);
        std::vector<collc_u64> offsets(nb + 1);
        for (collc_u64 b = 0; b <= nb; ++b) {
            collc_u64 r = reduce ? collc_ebq_reduce_sizes_one(in.data(), in_offsets.data(), local.data(), n, step,
                                                              inv2eb, payload.data(), offsets.data(), b)
                                 : collc_ebq_encode_sizes_one(x.data(), n, inv2eb, payload.data(), offsets.data(), b);
            bad = min_bad(bad, r);
        }
        if (report(bad)) return 0;
        exclusive_scan(offsets);
        std::vector<float> sums(n + 1);
        for (collc_u64 b = 0; b < nb; ++b) {
            if (reduce)
                collc_ebq_reduce_body_one(in.data(), in_offsets.data(), local.data(), n, step, inv2eb, payload.data(),
                                          offsets.data(), sums.data(), b);
            else
                collc_ebq_encode_body_one(x.data(), n, inv2eb, payload.data(), offsets.data(), b);
        }
        write_file(out_path, payload.data(), collc_align4(nb) + offsets[nb]);
    } else if (op == "ebq_dec") {
        const float step = hex_float(argv[3]);
        std::vector<collc_u8> in = read_file(argv[4]);
        std::vector<collc_u64> offsets(nb + 1);
        for (collc_u64 b = 0; b <= nb; ++b) collc_ebq_decode_sizes_one(in.data(), n, offsets.data(), b);
        exclusive_scan(offsets);
        std::vector<float> out(n + 1);
        for (collc_u64 b = 0; b < nb; ++b) collc_ebq_decode_body_one(in.data(), n, step, offsets.data(), out.data(), b);
        report(bad);
        write_file(out_path, out.data(), n * 4);
    } else if (op == "fwq_enc" || op == "fwq_dec") {
        const int bits = std::atoi(argv[3]);
        const int block = std::atoi(argv[4]);
        const collc_u64 blocks = collc_div_up(n, (collc_u64)block);
        const collc_u64 size = blocks * collc_fwq_block_bytes(bits, block);
        if (op == "fwq_enc") {
            std::vector<float> x = as<float>(read_file(argv[5]));
            std::vector<collc_u32> out(size / 4 + 1);
            for (collc_u64 b = 0; b < blocks; ++b)
                bad = min_bad(bad, collc_fwq_encode_one(x.data(), n, bits, block, (collc_u8*)out.data(), b));
            if (report(bad)) return 0;
            write_file(out_path, out.data(), size);
        } else {
            std::vector<collc_u32> in = as<collc_u32>(read_file(argv[5]));
            std::vector<float> out(n + 1);
            for (collc_u64 b = 0; b < blocks; ++b)
                collc_fwq_decode_one((const collc_u8*)in.data(), n, bits, block, out.data(), b);
            report(bad);
            write_file(out_path, out.data(), n * 4);
        }
    } else if (op == "hq_enc") {
        const float inv2eb = hex_float(argv[3]);
        std::vector<float> x = as<float>(read_file(argv[4]));
        std::vector<collc_i32> out(n + 1);
        for (collc_u64 i = 0; i < n; ++i) bad = min_bad(bad, collc_hq_encode_one(x.data(), inv2eb, out.data(), i));
        if (report(bad)) return 0;
        write_file(out_path, out.data(), n * 4);
    } else if (op == "hq_dec") {
        const float step = hex_float(argv[3]);
        std::vector<collc_i32> in = as<collc_i32>(read_file(argv[4]));
        std::vector<float> out(n + 1);
        for (collc_u64 i = 0; i < n; ++i) collc_hq_decode_one(in.data(), step, out.data(), i);
        report(bad);
        write_file(out_path, out.data(), n * 4);
    } else if (op == "hq_add") {
        std::vector<collc_i32> a = as<collc_i32>(read_file(argv[3]));
        std::vector<collc_i32> b = as<collc_i32>(read_file(argv[4]));
        std::vector<collc_i32> out(n + 1);
        for (collc_u64 i = 0; i < n; ++i) bad = min_bad(bad, collc_hq_add_one(a.data(), b.data(), out.data(), i));
        if (report(bad)) return 0;
        write_file(out_path, out.data(), n * 4);
    } else if (op == "fp16_enc" || op == "bf16_enc") {
        std::vector<float> x = as<float>(read_file(argv[3]));
        std::vector<collc_u16> out(n + 1);
        for (collc_u64 i = 0; i < n; ++i)
            bad = min_bad(bad, op == "fp16_enc" ? collc_fp16_encode_one(x.data(), out.data(), i)
                                                : collc_bf16_encode_one(x.data(), out.data(), i));
        if (report(bad)) return 0;
        write_file(out_path, out.data(), n * 2);
    } else if (op == "fp16_dec" || op == "bf16_dec") {
        std::vector<collc_u16> in = as<collc_u16>(read_file(argv[3]));
        std::vector<float> out(n + 1);
        for (collc_u64 i = 0; i < n; ++i) {
            if (op == "fp16_dec")
                collc_fp16_decode_one(in.data(), out.data(), i);
            else
                collc_bf16_decode_one(in.data(), out.data(), i);
        }
        report(bad);
        write_file(out_path, out.data(), n * 4);
    } else if (op == "lossless_enc") {
        std::vector<collc_u32> w = as<collc_u32>(read_file(argv[3]));
        const collc_u64 groups = collc_div_up(n, 32);
        std::vector<collc_u32> payload(33 * groups + 1);
        std::vector<collc_u64> offsets(groups + 1);
        for (collc_u64 g = 0; g <= groups; ++g)
            collc_lossless_encode_sizes_one(w.data(), n, (collc_u8*)payload.data(), offsets.data(), g);
        exclusive_scan(offsets);
        for (collc_u64 g = 0; g < groups; ++g)
            collc_lossless_encode_body_one(w.data(), n, (collc_u8*)payload.data(), offsets.data(), g);
        report(bad);
        write_file(out_path, payload.data(), 4 * groups + offsets[groups]);
    } else if (op == "lossless_dec") {
        std::vector<collc_u32> in = as<collc_u32>(read_file(argv[3]));
        const collc_u64 groups = collc_div_up(n, 32);
        std::vector<collc_u64> offsets(groups + 1);
        for (collc_u64 g = 0; g <= groups; ++g)
            collc_lossless_decode_sizes_one((const collc_u8*)in.data(), n, offsets.data(), g);
        exclusive_scan(offsets);
        std::vector<collc_u32> words(n + 1);
        for (collc_u64 g = 0; g < groups; ++g)
            collc_lossless_decode_deltas_one((const collc_u8*)in.data(), n, offsets.data(), words.data(), g);
        collc_u32 run = 0;  // what collc_scan_u32_* computes: an inclusive, wrapping prefix sum
        for (collc_u64 i = 0; i < n; ++i) words[i] = run += words[i];
        report(bad);
        write_file(out_path, words.data(), n * 4);
    } else {
        std::fprintf(stderr, "unknown op %s\n", op.c_str());
        return 2;
    }
    return 0;
}
