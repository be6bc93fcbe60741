// What run and export may write (issue 19, items 2 and 3): --force never destroys what is not a
// trace, an export never replaces its input, run.name cannot steer the default outputs out of
// runs/, and paths the filesystem cannot resolve are bad input (exit 2), not an abort.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "cli_process.h"

namespace moewb::cli::testing {
namespace {

namespace fs = std::filesystem;

TEST(CliOutputPath, ForceDoesNotReplaceAFileThatIsNotATrace) {
  TempDir dir("out-notes");
  const std::string notes = dir.file("notes.txt");
  { std::ofstream(notes) << "my notes\n"; }
  ProcessResult r = runMoewb("run -c " + tinyConfig() + " --steps 1 -q --force -o " + notes,
                             dir.path());
  EXPECT_EQ(r.exitCode, 2) << r.err;
  EXPECT_NE(r.err.find("not a moewb trace"), std::string::npos) << r.err;
  EXPECT_EQ(readFile(notes), "my notes\n");
  // A directory is not replaced either.
  r = runMoewb("run -c " + tinyConfig() + " --steps 1 -q --force -o " + dir.path().string(),
               dir.path());
  EXPECT_EQ(r.exitCode, 2) << r.err;
  EXPECT_NE(r.err.find("not a regular file"), std::string::npos) << r.err;
}

TEST(CliOutputPath, ForceReplacesATraceAndExportKeepsItsInput) {
  TempDir dir("out-trace");
  const std::string trace = dir.file("t.sqlite");
  ASSERT_EQ(runMoewb("run -c " + tinyConfig() + " --steps 2 -q -o " + trace, dir.path()).exitCode, 0);
  ProcessResult again =
      runMoewb("run -c " + tinyConfig() + " --steps 2 -q --force -o " + trace, dir.path());
  EXPECT_EQ(again.exitCode, 0) << again.err;

  const auto before = fs::file_size(trace);
  ProcessResult self = runMoewb("export " + trace + " --chrome " + trace, dir.path());
  EXPECT_EQ(self.exitCode, 2) << self.err;
  EXPECT_NE(self.err.find("input file itself"), std::string::npos) << self.err;
  EXPECT_EQ(fs::file_size(trace), before);

  const std::string json = dir.file("t.json");
  EXPECT_EQ(runMoewb("export " + trace + " --chrome " + json, dir.path()).exitCode, 0);
  ProcessResult exists = runMoewb("export " + trace + " --chrome " + json, dir.path());
  EXPECT_EQ(exists.exitCode, 2);
  EXPECT_NE(exists.err.find("--force"), std::string::npos) << exists.err;
  EXPECT_EQ(runMoewb("export " + trace + " --chrome " + json + " --force", dir.path()).exitCode, 0);
}

TEST(CliOutputPath, RunNameCannotLeaveRuns) {
  TempDir dir("out-name");
  for (const char* name : {"../escaped", "a/b/c", "\"\"", ".hidden"}) {
    ProcessResult r = runMoewb("run -c " + tinyConfig() + " --steps 1 -q --set run.name=" +
                                   std::string(name),
                               dir.path());
    EXPECT_EQ(r.exitCode, 2) << name << ": " << r.err;
    EXPECT_NE(r.err.find("run.name"), std::string::npos) << r.err;
  }
  EXPECT_FALSE(fs::exists(dir.path() / "escaped.sqlite"));
  EXPECT_FALSE(fs::exists(dir.path() / "runs" / "a"));
  EXPECT_FALSE(fs::exists(dir.path() / "runs" / ".sqlite"));
}

TEST(CliOutputPath, UnresolvablePathsAreBadInputNotAnAbort) {
  TempDir dir("out-long");
  const std::string longName = dir.file(std::string(300, 'x') + ".sqlite");
  ProcessResult r = runMoewb("run -c " + tinyConfig() + " --steps 1 -q -o " + longName, dir.path());
  EXPECT_EQ(r.exitCode, 2) << r.err;
  fs::create_symlink("loop", dir.path() / "loop");
  r = runMoewb("run -c " + tinyConfig() + " --steps 1 -q -o " + dir.file("loop/t.sqlite"),
               dir.path());
  EXPECT_EQ(r.exitCode, 2) << r.err;
  r = runMoewb("run -c " + tinyConfig() + " --steps 1 -q -o " + dir.file("missing/t.sqlite"),
               dir.path());
  EXPECT_EQ(r.exitCode, 2) << r.err;
  EXPECT_NE(r.err.find("does not exist"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace moewb::cli::testing
