// The NVIDIA driver's release ("580.159.04") for provenance lines (device descriptions, tuner
// exports), read from the Linux kernel module's version file. No CUDA needed: the parse is plain
// text, so it is tested on the CPU.
#pragma once

#include <string>

namespace moewb::engine {

// The release in the text of /proc/driver/nvidia/version: the first token after "Kernel Module"
// made of digits and dots with at least one dot ("NVRM version: NVIDIA UNIX Open Kernel Module
// for x86_64  580.159.04  Release Build ..." -> "580.159.04"); "" when there is none.
std::string nvidiaDriverReleaseFrom(const std::string& versionText);

// nvidiaDriverReleaseFrom of /proc/driver/nvidia/version; "" when the file cannot be read (no
// NVIDIA driver, another OS).
std::string nvidiaDriverRelease();

}  // namespace moewb::engine
