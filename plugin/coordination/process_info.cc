#include "coordination/process_info.h"

#include "coordination/wire.h"

namespace myplugin::coordination {

// Framed as a Register message body so the one codec serves; the type byte is unused.
std::string EncodeProcessInfo(const ProcessInfo& info) {
  std::string frame = Writer(MessageType::kRegister)
                          .Bytes(info.hostname)
                          .U32(static_cast<uint32_t>(info.num_devices))
                          .Bytes(info.device_kind)
                          .U32(static_cast<uint32_t>(info.pid))
                          .Bytes(info.address)
                          .Bytes(info.host_id)
                          .Finish();
  return frame.substr(4);
}

StatusOr<ProcessInfo> DecodeProcessInfo(const std::string& bytes) {
  Reader r(bytes);
  MessageType type;
  uint32_t rid, n, pid;
  ProcessInfo info;
  MYPLUGIN_RETURN_IF_ERROR(r.Header(&type, &rid));
  MYPLUGIN_RETURN_IF_ERROR(r.Bytes(&info.hostname));
  MYPLUGIN_RETURN_IF_ERROR(r.U32(&n));
  MYPLUGIN_RETURN_IF_ERROR(r.Bytes(&info.device_kind));
  MYPLUGIN_RETURN_IF_ERROR(r.U32(&pid));
  MYPLUGIN_RETURN_IF_ERROR(r.Bytes(&info.address));
  MYPLUGIN_RETURN_IF_ERROR(r.Bytes(&info.host_id));
  MYPLUGIN_RETURN_IF_ERROR(r.End());
  info.num_devices = static_cast<int>(n);
  info.pid = static_cast<int>(pid);
  return info;
}

}  // namespace myplugin::coordination
