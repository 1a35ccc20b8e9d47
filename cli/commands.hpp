// The subcommands of `zero`. Each takes the full argv (argv[0] is the program, argv[1] the
// subcommand) and returns the process exit code; errors are thrown as zero::Error.
#pragma once

#include <string>
#include <vector>

namespace zero::cli {

using Args = std::vector<std::string>;

int cmd_info(const Args& argv);
int cmd_comm_check(const Args& argv);
int cmd_train(const Args& argv);
int cmd_plan(const Args& argv);
int cmd_data(const Args& argv);
int cmd_compare(const Args& argv);
int cmd_ckpt(const Args& argv);

}  // namespace zero::cli
