# vq_job: durable delayed-job queue and transactional outbox for PostgreSQL (PGXS build).
EXTENSION    = vq_job
EXTVERSION   = 0.2.0
MODULE_big   = vq_job
OBJS         = $(patsubst %.c,%.o,$(sort $(wildcard src/*.c src/*/*.c)))
DATA         = $(filter-out $(DATA_built),$(wildcard sql/$(EXTENSION)--*.sql))
PG_CONFIG   ?= pg_config

# The install script of the current version (DATA_built) is built from the fragments of
# sql/schema/, concatenated in this order (sql/README.md); the install scripts of released
# versions and the upgrade scripts are plain files in sql/ (DATA), installed as they are.
SQL_FRAGMENTS = $(addprefix sql/schema/,schema.sql jobs.sql registry.sql enqueue.sql consumers.sql \
                outbox.sql callbacks.sql operations.sql views.sql privileges.sql dump.sql)
DATA_built   = sql/$(EXTENSION)--$(EXTVERSION).sql

# Warnings are errors: the server's CFLAGS plus -Wextra (minus the two the headers trip).
PG_CFLAGS   += -Wall -Wextra -Werror -Wno-unused-parameter -Wno-missing-field-initializers
# The executors compare it with the installed extension version. Sources include each other
# by folder (#include "run/roles.h"), from src/.
PG_CPPFLAGS += -DVQ_EXTVERSION=\"$(EXTVERSION)\" -I$(srcdir)/src

# Tests against a running server with vq_job preloaded (make installcheck; PGHOST, PGPORT
# and PGUSER say which): pg_regress scripts in test/sql with their expected output in
# expected/ (test/expected links to it), setup first (it keeps the executors out of the
# regression database and creates the extension); isolation specs in test/isolation/specs.
REGRESS      = setup $(filter-out setup,$(patsubst test/sql/%.sql,%,$(sort $(wildcard test/sql/*.sql))))
REGRESS_OPTS = --inputdir=test --outputdir=test
ISOLATION    = $(patsubst test/isolation/specs/%.spec,%,$(sort $(wildcard test/isolation/specs/*.spec)))
ISOLATION_OPTS = --inputdir=test/isolation --outputdir=test/isolation/output

# vq_consumer is built with the caller's CFLAGS, CPPFLAGS and LDFLAGS from the environment
# (dpkg-buildflags in a package build), not with the server's that PGXS sets below.
VQ_CONSUMER_FLAGS := $(foreach v,CFLAGS CPPFLAGS LDFLAGS,$(if $(filter environment,$(origin $(v))),$(v)='$(value $(v))'))

PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# PGXS tracks no header dependencies: rebuild every object when a header changes.
$(OBJS): $(wildcard src/*.h src/*/*.h)

# The reference NOTIFY consumer (libpq program), built and installed with the extension.
.PHONY: consumer install-consumer clean-consumer
all: consumer
consumer:
	$(MAKE) -C consumer PG_CONFIG=$(PG_CONFIG) $(VQ_CONSUMER_FLAGS)
install: install-consumer
install-consumer: consumer
	$(MAKE) -C consumer PG_CONFIG=$(PG_CONFIG) $(VQ_CONSUMER_FLAGS) install
clean: clean-consumer
clean-consumer:
	$(MAKE) -C consumer clean

# The install script: the fragments in SQL_FRAGMENTS order, a blank line between two (make
# clean removes it). Every file of sql/schema/ must be listed there, and only those.
ifneq ($(sort $(SQL_FRAGMENTS)),$(sort $(wildcard sql/schema/*.sql)))
$(error sql/schema/ and SQL_FRAGMENTS (Makefile) differ: $(strip \
    $(addprefix  not listed: ,$(filter-out $(SQL_FRAGMENTS),$(wildcard sql/schema/*.sql))) \
    $(addprefix  missing: ,$(filter-out $(wildcard sql/schema/*.sql),$(SQL_FRAGMENTS)))))
endif
$(DATA_built): $(SQL_FRAGMENTS) Makefile
	awk 'FNR == 1 && NR > 1 { print "" } { print }' $(SQL_FRAGMENTS) > $@.tmp
	mv $@.tmp $@

# The same tests on a temporary instance that preloads vq_job (no server needed; PGXS has
# no "make check" for extensions).
TEMP_INSTANCE_OPTS = --temp-instance=$(CURDIR)/tmp_check --temp-config=$(CURDIR)/test/temp-instance.conf
.PHONY: temp-check
temp-check:
	$(MAKE) installcheck EXTRA_REGRESS_OPTS="$(TEMP_INSTANCE_OPTS)"

.PHONY: run test bench cassert fuzz
run:
	./scripts/run
test:
	./scripts/test
bench:
	./scripts/bench
cassert:
	./scripts/cassert
# The API fuzz run for 5 minutes (the regular suite runs it for 20 s).
fuzz:
	VQ_TEST_ONLY=api_fuzz.sh VQ_FUZZ_SECS=300 ./scripts/test
# The chaos soak: 10 minutes of producers and faults, then the exact accounting (not in CI;
# test/scenarios/soak_short.sh is its 60-s version in the regular suite).
.PHONY: soak
soak:
	./test/soak/soak.sh
# vq_job on a pg_auto_failover formation (not part of CI, about 5 minutes): two planned
# switchovers, two killed primaries, two killed with asynchronous replication, under load
# (test/failover/failover.sh; the regular suite runs a switchover and a kill,
# test/scenarios/failover.sh).
.PHONY: failover
failover:
	FO_EVENTS="switchover kill kill_async switchover kill kill_async" FO_LOAD_SECS=20 FO_PRODUCERS=4 \
		./test/failover/failover.sh

# ---- Release artifacts: scripts/package (not part of ./scripts/test) ---------------------
# make dist          vq_job-$(EXTVERSION).tar.gz: git archive of HEAD, checked to build
# make distcheck     dist, then a build and a staged install from the unpacked tarball
# make deb           the Debian package postgresql-<major>-vq-job (dpkg-buildpackage), in build/deb/
# make package-test  that package installed on a clean Debian 12 root (debootstrap), a job run
.PHONY: print-version dist distcheck deb package-test
print-version:
	@echo $(EXTVERSION)
dist distcheck deb package-test:
	VQ_VERSION=$(EXTVERSION) PG_CONFIG=$(PG_CONFIG) ./scripts/package $(patsubst package-%,%,$@)
# make clean leaves the tree as unpacked (a Debian source build compares it with the tarball):
# installcheck writes its results under test/ (REGRESS_OPTS, ISOLATION_OPTS).
.PHONY: clean-test-output
clean: clean-test-output
clean-test-output:
	rm -rf test/results test/regression.diffs test/regression.out test/isolation/output
