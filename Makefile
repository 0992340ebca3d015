# minfer: one build entry. `make` builds build/minfer and the libraries for PHASE
# (default: the top phase). See README.md and docs/ARCHITECTURE.md.
#   make PHASE=7b      common + 7a + 7b only        make SAN=1   ASan + UBSan
#   make CUDA_ARCH=sm_90                              make BUILD=build-x  other output dir
PHASE     ?= 8b
BUILD     ?= build
SAN       ?= 0
DEBUG     ?= 0
CUDA_ARCH ?= sm_90

PHASES_ALL := 7a 7b 7c 7d 7e 8a 8b
PHASE_DIR_7a := phase7a_skeleton
PHASE_DIR_7b := phase7b_ops
PHASE_DIR_7c := phase7c_wiring
PHASE_DIR_7d := phase7d_graphs
PHASE_DIR_7e := phase7e_perf
PHASE_DIR_8a := phase8a_decode
PHASE_DIR_8b := phase8b_batch
# the top phase: the default PHASE, and the build the device benches use
PHASE_TOP    := $(lastword $(PHASES_ALL))
ifeq ($(filter $(PHASE),cpu $(PHASES_ALL)),)
$(error PHASE must be one of: cpu $(PHASES_ALL))
endif
# phases up to and including PHASE
PHASES := $(if $(filter cpu,$(PHASE)),,$(wordlist 1,$(words $(shell echo $(PHASES_ALL) | sed 's/ $(PHASE) .*/ $(PHASE)/;s/^\(.*$(PHASE)\).*/\1/')),$(PHASES_ALL)))

CC      ?= cc
NVCC    ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
CUDA_HOME ?= $(if $(NVCC),$(patsubst %/bin/nvcc,%,$(NVCC)),)
ifeq ($(MINFER_NO_NVCC),1)
NVCC :=
endif
ifeq ($(NVCC),)
PHASES :=
endif
# a phase whose directory has no sources yet is reported and left out
# (strip: foreach leaves the spaces between empty results, which $(if) counts as non-empty)
PHASES_MISSING := $(strip $(foreach p,$(PHASES),$(if $(wildcard $(PHASE_DIR_$(p))/*.c $(PHASE_DIR_$(p))/*.cu),,$(p))))
PHASES := $(filter-out $(PHASES_MISSING),$(PHASES))

OPT     := $(if $(filter 1,$(DEBUG)),-O0,-O2)
comma   := ,
SANF    := $(if $(filter 1,$(SAN)),-fsanitize=address$(comma)undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined,)
CFLAGS  += -std=c11 $(OPT) -g -Wall -Wextra -Werror -Wno-unused-parameter -MMD -MP -pthread \
           -D_GNU_SOURCE -ffp-contract=off -fno-strict-aliasing -I. $(SANF)
LDFLAGS += -pthread $(SANF)
LDLIBS  += -lm
AVX2F   := -mavx2 -mfma -mf16c
AVX512F := $(AVX2F) -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx512bf16
NVFLAGS := -std=c++17 -O3 -arch=$(CUDA_ARCH) -I. -Xcompiler -Wall,-Wno-unused-parameter -lineinfo -MMD -MP
# NVDEFS: extra -D defines for the CUDA sources, for a measurement build of a build-time switch
# (tools/bench_builds.sh; e.g. NVDEFS=-DMI_PDL_TRIGGER=0). Use a build folder of its own.
NVFLAGS += $(NVDEFS)

COMMON_SRC := $(shell find common -name '*.c' | sort)
TOOLS_SRC  := $(wildcard tools/*.c)

# `minfer serve` (server/, tools/cmd_serve.c) needs libmicrohttpd and jansson (Debian/Ubuntu:
# libmicrohttpd-dev, libjansson-dev; `make deps` installs them) and links them into build/minfer
# only: libminfer.a stays free of HTTP. Where the system lacks the headers (the GPU host, which
# has no network), the .deb files that tools/fetch_serve_deps.sh puts in .carry/serve-debs are
# unpacked into $(BUILD)/serve-deps and used from there (headers, and the libraries through an
# rpath). With neither, serve is left out of the binary and the build says so.
SERVE_DEBS   := .carry/serve-debs
SERVE_PREFIX := $(abspath $(BUILD))/serve-deps
SERVE_HAS_HEADERS := $(shell printf '\043include <microhttpd.h>\n\043include <jansson.h>\n' | $(CC) -E -x c - >/dev/null 2>&1 && echo yes)
ifeq ($(SERVE_HAS_HEADERS),yes)
SERVE_FROM   := system
SERVE_LIBS   := -lmicrohttpd -ljansson
else ifneq ($(wildcard $(SERVE_DEBS)/*.deb),)
SERVE_FROM   := $(SERVE_DEBS)
SERVE_ARCH   := $(shell $(CC) -print-multiarch)
SERVE_CFLAGS := -I$(SERVE_PREFIX)/usr/include -I$(SERVE_PREFIX)/usr/include/$(SERVE_ARCH)
SERVE_LIBS   := -L$(SERVE_PREFIX)/usr/lib/$(SERVE_ARCH) -Wl,-rpath,$(SERVE_PREFIX)/usr/lib/$(SERVE_ARCH) -lmicrohttpd -ljansson
SERVE_UNPACK := $(SERVE_PREFIX)/.unpacked
endif
ifeq ($(SERVE_FROM),)
TOOLS_SRC  := $(filter-out tools/cmd_serve.c,$(TOOLS_SRC))
SERVE_SRC  :=
else
SERVE_SRC  := $(wildcard server/*.c)
endif
PHASE_C    := $(foreach p,$(PHASES),$(wildcard $(PHASE_DIR_$(p))/*.c))
PHASE_CU   := $(foreach p,$(PHASES),$(wildcard $(PHASE_DIR_$(p))/*.cu))

obj = $(patsubst %.c,$(BUILD)/%.o,$(1))
COMMON_OBJ := $(call obj,$(COMMON_SRC))
TOOLS_OBJ  := $(call obj,$(TOOLS_SRC))
SERVE_OBJ  := $(call obj,$(SERVE_SRC) $(filter tools/cmd_serve.c,$(TOOLS_SRC)))
PHASE_OBJ  := $(call obj,$(PHASE_C)) $(patsubst %.cu,$(BUILD)/%.cu.o,$(PHASE_CU))
GEN_OBJ    := $(BUILD)/gen/phases.o

ifneq ($(PHASES),)
CFLAGS  += -DMI_HAVE_CUDA=1 -I$(CUDA_HOME)/include
LDLIBS  += -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt -lstdc++
endif

LIB := $(BUILD)/libminfer.a
BIN := $(BUILD)/minfer

# Criterion tests (CPU): gates/common/test_*.c, each its own binary.
TEST_SRC := $(wildcard gates/common/test_*.c)
TEST_BIN := $(patsubst gates/common/%.c,$(BUILD)/tests/%,$(TEST_SRC))
# Plain C gate programs (device + CPU helpers): gates/<phase>/gate_*.c and bench_*.c
GATE_SRC := $(wildcard gates/common/gate_*.c gates/common/bench_*.c) \
            $(foreach p,$(PHASES),$(wildcard gates/$(p)/gate_*.c gates/$(p)/bench_*.c))
GATE_CU  := $(foreach p,$(PHASES),$(wildcard gates/$(p)/gate_*.cu))
# the decode-step timeline (gates/8a/bench_trace.c) reads kernel times through CUPTI, which comes
# with the CUDA toolkit: built where its header and library are found, left out elsewhere
CUPTI_INC := $(firstword $(foreach d,$(CUDA_HOME)/include $(CUDA_HOME)/extras/CUPTI/include,$(if $(wildcard $(d)/cupti.h),$(d))))
CUPTI_LIB := $(firstword $(foreach d,$(CUDA_HOME)/lib64 $(CUDA_HOME)/lib $(CUDA_HOME)/extras/CUPTI/lib64,$(if $(wildcard $(d)/libcupti.so),$(d))))
ifeq ($(and $(CUPTI_INC),$(CUPTI_LIB)),)
GATE_SRC := $(filter-out gates/8a/bench_trace.c,$(GATE_SRC))
else
$(BUILD)/gates/8a/bench_trace: CFLAGS += -I$(CUPTI_INC)
$(BUILD)/gates/8a/bench_trace: LDLIBS += -L$(CUPTI_LIB) -Wl,-rpath,$(CUPTI_LIB) -lcupti
endif
GATE_BIN := $(patsubst gates/%.c,$(BUILD)/gates/%,$(GATE_SRC)) $(patsubst gates/%.cu,$(BUILD)/gates/%,$(GATE_CU))
# compiled units the gate programs link from one archive (a program pulls in only what it
# calls): gates/support/*.c, shared by all; gates/<phase>/*.c not named gate_* or bench_*,
# one phase's test bodies split out of its programs
# (and *.cu: a gate's own device code, e.g. kernel variants the library does not build)
GATE_UNIT_SRC    := $(foreach p,$(PHASES),$(filter-out gates/$(p)/gate_% gates/$(p)/bench_%,$(wildcard gates/$(p)/*.c)))
GATE_UNIT_CU     := $(foreach p,$(PHASES),$(filter-out gates/$(p)/gate_%,$(wildcard gates/$(p)/*.cu)))
GATE_SUPPORT_OBJ := $(call obj,$(wildcard gates/support/*.c) $(GATE_UNIT_SRC)) $(patsubst %.cu,$(BUILD)/%.cu.o,$(GATE_UNIT_CU))
GATE_LIB := $(BUILD)/libgatesupport.a

.PHONY: all lib tests gates run test models deps venv clean info $(addprefix gate-,$(PHASES_ALL)) fuzz \
        bench-era-a bench-phases bench-7e bench-8b bench-cpu
all: info $(BIN) gates
info:
	@if [ -z "$(NVCC)" ]; then echo "minfer: nvcc not found: CUDA phases compiled out, CPU-only build (PHASE=$(PHASE))"; \
	 else echo "minfer: nvcc $(NVCC), CUDA_ARCH=$(CUDA_ARCH), phases: $(or $(PHASES),none) (PHASE=$(PHASE))$(if $(PHASES_MISSING), not yet implemented: $(PHASES_MISSING))"; fi
	@$(if $(SERVE_FROM),true,echo "minfer: libmicrohttpd/jansson headers not found: \`minfer serve\` left out (make deps; on a host without network: tools/fetch_serve_deps.sh, carry .carry/serve-debs)")

lib: $(LIB)
$(LIB): $(COMMON_OBJ) $(PHASE_OBJ) $(GEN_OBJ)
	@mkdir -p $(@D)
	@rm -f $@
	ar rcs $@ $^

$(BIN): $(TOOLS_OBJ) $(SERVE_OBJ) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $(sort $(TOOLS_OBJ) $(SERVE_OBJ)) $(LIB) $(LDLIBS) $(SERVE_LIBS)

$(SERVE_OBJ): CFLAGS += $(SERVE_CFLAGS)
$(SERVE_OBJ): | $(SERVE_UNPACK)
# the carried .deb files, unpacked (no root, no dpkg database): dpkg-deb -x
$(SERVE_PREFIX)/.unpacked: $(wildcard $(SERVE_DEBS)/*.deb)
	@mkdir -p $(@D)
	@for d in $^; do dpkg-deb -x "$$d" $(@D) || exit 1; done
	@echo "minfer: serve libraries unpacked from $(SERVE_DEBS) into $(@D)"
	@touch $@

# generated: calls each built phase's install in phase order
$(BUILD)/gen/phases.c: FORCE
	@mkdir -p $(@D)
	@{ echo '/* generated by the Makefile: phase installs in order */'; \
	   echo '#include "common/backend/backend.h"'; \
	   for p in $(PHASES); do echo "void mi_phase$${p}_install(void);"; done; \
	   echo 'const char *mi_build_phase = "$(if $(PHASES),$(lastword $(PHASES)),cpu)";'; \
	   echo 'void mi_phases_install(void) {'; echo '    static int done;'; echo '    if (done) return;'; echo '    done = 1;'; \
	   for p in $(PHASES); do echo "    mi_phase$${p}_install();"; done; echo '}'; } > $@.tmp
	@cmp -s $@.tmp $@ || mv $@.tmp $@; rm -f $@.tmp
FORCE:

$(BUILD)/%_avx2.o: %_avx2.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(AVX2F) -c $< -o $@
$(BUILD)/%_avx512.o: %_avx512.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(AVX512F) -c $< -o $@
$(BUILD)/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c $< -o $@
# *_exact.cu: kernels that must be bit-identical to the CPU (common/core/mi_canon.h): no FMA contraction
$(BUILD)/%_exact.cu.o: %_exact.cu
	@mkdir -p $(@D)
	$(NVCC) $(NVFLAGS) --fmad=false -c $< -o $@
# *_sm90a.cu: kernels that need Hopper's arch-specific instructions (wgmma): built for sm_90a
# (and -DMI_BUILT_SM90A) when CUDA_ARCH is sm_90; otherwise like the rest, their kernel bodies
# compile empty and the host side reports the kernel unavailable
$(BUILD)/%_sm90a.cu.o: %_sm90a.cu
	@mkdir -p $(@D)
	$(NVCC) $(if $(filter sm_90,$(CUDA_ARCH)),$(subst -arch=sm_90,-arch=sm_90a,$(NVFLAGS)) -DMI_BUILT_SM90A,$(NVFLAGS)) -c $< -o $@
$(BUILD)/%.cu.o: %.cu
	@mkdir -p $(@D)
	$(NVCC) $(NVFLAGS) -c $< -o $@

tests: $(TEST_BIN)
$(BUILD)/tests/%: gates/common/%.c $(LIB)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDFLAGS) $(LDLIBS) -lcriterion
# the gates' own helpers (test selection) come from the gate support archive
$(BUILD)/tests/test_gate_util: gates/common/test_gate_util.c $(GATE_LIB) $(LIB)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $< $(GATE_LIB) $(LIB) $(LDFLAGS) $(LDLIBS) -lcriterion

gates: $(GATE_BIN)
$(GATE_LIB): $(GATE_SUPPORT_OBJ)
	@mkdir -p $(@D)
	@rm -f $@
	ar rcs $@ $^
$(BUILD)/gates/%: gates/%.c $(GATE_LIB) $(LIB)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $< $(GATE_LIB) $(LIB) $(LDFLAGS) $(LDLIBS)
$(BUILD)/gates/%: gates/%.cu $(GATE_LIB) $(LIB)
	@mkdir -p $(@D)
	$(NVCC) $(NVFLAGS) -o $@ $< $(GATE_LIB) $(LIB) -lcudart_static -ldl -lrt

# ---- set-up, models, run, test ----
# Every Python step runs in the virtual environment VENV (inside the repo, git-ignored) that
# tools/setup_deps.sh makes; scripts started from here find it through MINFER_PYTHON.
VENV          ?= .venv
PY            := $(abspath $(VENV))/bin/python
export MINFER_PYTHON := $(PY)
DEFAULT_MODEL := models/SmolLM2-135M-Instruct.Q4_1.gguf
# deps: everything `make test` needs (apt + venv); venv: the Python side only (`make run`)
deps:
	@MINFER_VENV=$(VENV) bash tools/setup_deps.sh all
venv:
	@MINFER_VENV=$(VENV) bash tools/setup_deps.sh python
# make models: every model (MODELS=default: only the default one)
models: venv
	@$(PY) tools/fetch_models.py
# make run: the default model only (~100 MB); `make models` fetches the others
run: venv all
	@MINFER_MODELS=default $(PY) tools/fetch_models.py
	$(BIN) run -m $(DEFAULT_MODEL) --chat -p "What is the capital of France? Answer in one sentence." -n 48
# make test: the gates use all three real models
test: deps
	@$(MAKE) --no-print-directory all tests
	@MINFER_MODELS=all $(PY) tools/fetch_models.py
	@bash gates/run_tests.sh $(BUILD)

# gate-<phase>: build at that PHASE and run every gate up to it (earlier gates = regression suite)
$(addprefix gate-,$(PHASES_ALL)):
	@$(MAKE) --no-print-directory PHASE=$(@:gate-%=%) BUILD=$(BUILD)-$(@:gate-%=%) all
	@bash gates/run_device_gates.sh $(BUILD)-$(@:gate-%=%) $(@:gate-%=%)

fuzz:
	@bash gates/common/fuzz/run_fuzz.sh gguf $(or $(FUZZ_SECONDS),60)
	@bash gates/common/fuzz/run_fuzz.sh model $(or $(FUZZ_SECONDS),60)

# device benches (phase 7e on): tools/bench_*.sh; records appended to results/*.jsonl.
# bench-era-a: the record, at the top phase; bench-7e: 7e's items A/B, at PHASE=7e; bench-8b below
bench-era-a:
	@$(MAKE) --no-print-directory PHASE=$(PHASE_TOP) BUILD=$(BUILD)-$(PHASE_TOP) all
	@bash tools/bench_era_a.sh $(BUILD)-$(PHASE_TOP)
bench-phases:
	@bash tools/bench_phases.sh $(BUILD)
bench-7e:
	@$(MAKE) --no-print-directory PHASE=7e BUILD=$(BUILD)-7e all
	@bash tools/bench_7e.sh $(BUILD)-7e
# bench-8b: many sequences a step (minfer bench --batch 1,4,16,32,64 -p 512 -n 128), at PHASE=8b
bench-8b:
	@$(MAKE) --no-print-directory PHASE=8b BUILD=$(BUILD)-8b all
	@bash tools/bench_8b.sh $(BUILD)-8b

clean:
	rm -rf $(BUILD) $(addprefix $(BUILD)-,$(PHASES_ALL))

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

# CPU benchmark record (results/BENCH-CPU.md): SmolLM2 Q4_1, synth 0.5B Q4_0 / Q4_K_M, bandwidth beside
bench-cpu: all models
	bash results/bench-cpu.sh $(BUILD)
