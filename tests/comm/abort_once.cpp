// abort_once: ends its "job" with zero::comm::abort_job(MESSAGE, 3) and nothing else, without
// MPI, for tests/comm/test_abort_once.py, which runs it as ranks of a job by setting a launcher's
// variables (OMPI_COMM_WORLD_RANK/SIZE, PMIX_NAMESPACE, PMIX_SERVER_TMPDIR) itself.
//   abort_once MESSAGE
#include <string>

#include "comm/abort.hpp"

int main(int argc, char** argv) {
  zero::comm::abort_job(argc > 1 ? argv[1] : "abort_once: no message", 3);
}
