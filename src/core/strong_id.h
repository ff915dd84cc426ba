// Strong identifier types, so a NodeId cannot be passed where a TenantId is expected.
//
//   struct NodeTag {};
//   using NodeId = StrongId<NodeTag, uint32_t>;
//   NodeId n{7};
//   n.value();  // 7
#pragma once

#include <compare>
#include <cstddef>
#include <functional>

namespace tessera::core {

template <typename Tag, typename Rep>
class StrongId {
 public:
  using rep_type = Rep;

  constexpr StrongId() = default;
  constexpr explicit StrongId(Rep value) : value_(std::move(value)) {}

  constexpr const Rep& value() const { return value_; }
  constexpr auto operator<=>(const StrongId&) const = default;

 private:
  Rep value_{};
};

}  // namespace tessera::core

template <typename Tag, typename Rep>
struct std::hash<tessera::core::StrongId<Tag, Rep>> {
  size_t operator()(const tessera::core::StrongId<Tag, Rep>& id) const noexcept {
    return std::hash<Rep>{}(id.value());
  }
};
