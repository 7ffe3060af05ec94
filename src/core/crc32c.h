// CRC-32C (Castagnoli), as iSCSI / ext4: crc32c("123456789") == 0xE3069283. `crc` chains calls. One definition for
// the P/D transport's chunks (server/kv_transfer) and the exported state blob (cache/state_blob).
#pragma once
#include <cstdint>
#include <string_view>

namespace dsinfer {

uint32_t crc32c(std::string_view data, uint32_t crc = 0);

}  // namespace dsinfer
