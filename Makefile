# comfuse — `make` builds the library and CLI; `make test` runs every CPU test.
CC      ?= cc
CFLAGS  ?= -O2 -g
override CFLAGS += -std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -Wall -Wextra -Werror -Wshadow \
           -Wmissing-prototypes -Iinclude -Isrc -fPIC -fvisibility=hidden
LDLIBS  += -lm -ldl -lpthread
BUILD   ?= build

LIB_SRC := $(filter-out src/cli%.c,$(wildcard src/*.c))
CLI_SRC := $(wildcard src/cli*.c)
LIB_OBJ := $(LIB_SRC:src/%.c=$(BUILD)/obj/%.o)
# src/rt_*.c take CUDA types from the toolkit headers (no link-time CUDA
# dependency); every src/device/*.cuh and *.h is embedded for NVRTC by tools/embed.c.
CUDA_HOME ?= /usr/local/cuda
DEVICE_HDRS := $(sort $(wildcard src/device/*.cuh src/device/*.h))
LIB_OBJ += $(BUILD)/obj/gen_device_headers.o
TESTS   := $(patsubst tests/%.c,$(BUILD)/tests/%,$(filter-out tests/test_util.c,$(wildcard tests/test_*.c)))

all: $(BUILD)/libcomfuse.a $(BUILD)/libcomfuse.so $(BUILD)/comfuse $(BUILD)/cfgen

$(BUILD)/obj/%.o: src/%.c src/cf_internal.h include/comfuse.h $(wildcard src/*.inc)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/obj/rt_%.o: override CFLAGS += -isystem $(CUDA_HOME)/include
$(BUILD)/obj/rt_%.o: src/rt_cuda.h

$(BUILD)/tools/embed: tools/embed.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< -o $@

$(BUILD)/gen/device_headers.c: $(BUILD)/tools/embed $(DEVICE_HDRS) $(wildcard src/device)
	@mkdir -p $(dir $@)
	$(BUILD)/tools/embed $@ $(DEVICE_HDRS)

$(BUILD)/obj/gen_device_headers.o: $(BUILD)/gen/device_headers.c src/cf_internal.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/libcomfuse.a: $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/libcomfuse.so: $(LIB_OBJ)
	$(CC) -shared -o $@ $^ $(LDLIBS)

$(BUILD)/comfuse: $(CLI_SRC) src/cli.h $(BUILD)/libcomfuse.a
	$(CC) $(CFLAGS) $(CLI_SRC) -o $@ $(BUILD)/libcomfuse.a $(LDLIBS)

# tests/gen.c: the random graph generator, shared by the tests and cfgen.
GEN_OBJ := $(BUILD)/obj/tests/gen.o
$(GEN_OBJ): tests/gen.c tests/gen.h src/cf_internal.h include/comfuse.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests -c $< -o $@

$(BUILD)/cfgen: tools/cfgen.c $(GEN_OBJ) $(BUILD)/libcomfuse.a
	$(CC) $(CFLAGS) -Itests $< $(GEN_OBJ) -o $@ $(BUILD)/libcomfuse.a $(LDLIBS)

$(BUILD)/tests/%: tests/%.c tests/test_util.h tests/gen.h $(GEN_OBJ) $(BUILD)/libcomfuse.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests $< $(GEN_OBJ) -o $@ $(BUILD)/libcomfuse.a $(LDLIBS)

# A stand-in libcuda.so.1 (no sanitizers): test_cli runs the host side of `run` on it.
$(BUILD)/tests/fake/libcuda.so.1: tests/fake_cuda.c
	@mkdir -p $(dir $@)
	$(CC) -O1 -g -shared -fPIC -fvisibility=hidden -Wall -Wextra -Werror -isystem $(CUDA_HOME)/include $< -o $@

test: all $(TESTS) $(BUILD)/tests/fake/libcuda.so.1
	@./tests/run.sh $(BUILD)
	@$(if $(filter 1,$(INSTALL_TEST)),./tests/install.sh $(BUILD))
	@$(if $(filter 1,$(PYTHON_TESTS)),$(MAKE) --no-print-directory test-python)

# The PyTorch frontend (python/) against this build's library: tracing, region matching,
# lowering and kernel builds run on the CPU; GPU tests skip without CUDA.  bench/tests: the grid
# script's cells, ratios and verdicts, on a fake GPU.
PYTHON_TESTS ?= 1
INSTALL_TEST ?= 1   # the installed header and libraries (not under the sanitizers' build)
test-python: $(BUILD)/libcomfuse.so
	COMFUSE_LIB=$(abspath $(BUILD))/libcomfuse.so python3 -m pytest -q -p no:cacheprovider python/tests bench/tests

# The same tests under AddressSanitizer + UndefinedBehaviorSanitizer.
test-asan:
	$(MAKE) test BUILD=build-asan CC=clang PYTHON_TESTS=0 INSTALL_TEST=0 \
	    CFLAGS="-O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer" \
	    LDFLAGS="-fsanitize=address,undefined"

# libFuzzer: fuzz_spec over the parser, Φ, the IR printer and code generation (no NVRTC);
# fuzz_cli over the CLI's option parser.  FUZZ_SECONDS bounds the whole run, split between them.
FUZZ_SECONDS ?= 60
FUZZ_CC := clang -std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -O1 -g -Iinclude -Isrc \
    -isystem $(CUDA_HOME)/include -fsanitize=fuzzer,address,undefined
fuzz: $(BUILD)/fuzz_spec $(BUILD)/fuzz_cli
	mkdir -p $(BUILD)/fuzz-corpus $(BUILD)/fuzz-corpus-cli && cp examples/*.cf $(BUILD)/fuzz-corpus/
	$(BUILD)/fuzz_spec -max_total_time=$$(( ($(FUZZ_SECONDS) + 1) / 2 )) -max_len=4096 -rss_limit_mb=2048 \
	    $(BUILD)/fuzz-corpus fuzz/corpus
	$(BUILD)/fuzz_cli -max_total_time=$$(( $(FUZZ_SECONDS) / 2 )) -max_len=1024 -rss_limit_mb=2048 \
	    -close_fd_mask=3 $(BUILD)/fuzz-corpus-cli fuzz/corpus_cli

$(BUILD)/fuzz_spec: fuzz/fuzz_spec.c $(LIB_SRC) src/cf_internal.h include/comfuse.h $(BUILD)/gen/device_headers.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $< $(LIB_SRC) $(BUILD)/gen/device_headers.c -o $@ -lm -ldl -lpthread

$(BUILD)/fuzz_cli: fuzz/fuzz_cli.c src/cli_opts.c src/cli.h $(LIB_SRC) src/cf_internal.h include/comfuse.h \
                   $(BUILD)/gen/device_headers.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $< src/cli_opts.c $(LIB_SRC) $(BUILD)/gen/device_headers.c -o $@ -lm -ldl -lpthread

# The C library as its users install it: the one public header, both libraries, and a
# pkg-config file (`pkg-config --cflags --libs comfuse`).
PREFIX ?= /usr/local
install: $(BUILD)/libcomfuse.a $(BUILD)/libcomfuse.so
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 644 include/comfuse.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 $(BUILD)/libcomfuse.a $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(BUILD)/libcomfuse.so $(DESTDIR)$(PREFIX)/lib/
	sed -e 's#@PREFIX@#$(PREFIX)#' -e 's#@VERSION@#$(shell sed -n 's/^#define CF_VERSION "\(.*\)"/\1/p' include/comfuse.h)#' \
	    tools/comfuse.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/comfuse.pc

# `make install` into a scratch prefix, then a C program that includes only the installed header
# builds against it through pkg-config and runs (the header must stand alone).
test-install: all
	@./tests/install.sh $(BUILD)

clean:
	rm -rf build build-asan

.PHONY: all test test-python test-asan test-install install fuzz clean
