// Programmatic dependent launch (PDL, sm_90) of the decode-path kernels: a kernel launched with
// cudaLaunchAttributeProgrammaticStreamSerialization may be scheduled while the kernel before it in the stream is
// still running (inside CUDA graphs too, as a programmatic edge), so its launch and block dispatch overlap the
// previous kernel's tail instead of following its completion. Such a kernel must execute pdl_wait() (pdl.cuh) in
// every block before it touches global memory that earlier work writes or reads: griddepcontrol.wait returns once
// the previous grid has completed and its writes are visible. Every kernel that pdl_launch starts waits before any
// access but its first loads of model weights, so completion stays transitive (a PDL kernel cannot complete before
// the grid it follows) and the bits are those of plain launches. Host-only header (no CUDA types).
#pragma once

namespace dsinfer::cuda {

// Whether pdl_launch sets the attribute: on unless DSINFER_PDL=0 (read once, like DSINFER_CUDA_GRAPHS), or as the
// last pdl_set_enabled call left it (the bench's A/B and the GPU test that compares both).
bool pdl_enabled();
void pdl_set_enabled(bool on);

}  // namespace dsinfer::cuda
