// The array types of the binding: what it reads without a copy (any DLPack or buffer-protocol array on
// the CPU: NumPy, PyTorch, ...) and the NumPy arrays it returns.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include "blockpilot/acceptance/acceptance_rule.hpp"
#include "blockpilot/types.hpp"

namespace blockpilot::python {

namespace nb = nanobind;

/// A C-contiguous host array read in place; other dtypes or layouts are converted (one copy) on the way in.
template <class T, class... Shape>
using host_array = nb::ndarray<const T, nb::c_contig, nb::device::cpu, Shape...>;
using rows_array = host_array<float, nb::ndim<2>>;          ///< [rows][vocab] float32
using tokens_array = host_array<token_id, nb::ndim<1>>;     ///< [n] int32

/// A NumPy array that owns `values` (moved into it).
template <class T>
nb::ndarray<nb::numpy, T> to_numpy(std::vector<T>&& values, std::initializer_list<std::size_t> shape) {
  auto* owned = new std::vector<T>(std::move(values));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::ndarray<nb::numpy, T>(owned->data(), shape, owner);
}

/// A NumPy bool array of flags.
inline nb::ndarray<nb::numpy, bool> to_numpy(const std::vector<bool>& flags) {
  auto* owned = new bool[flags.size()];
  std::copy(flags.begin(), flags.end(), owned);
  nb::capsule owner(owned, [](void* p) noexcept { delete[] static_cast<bool*>(p); });
  return nb::ndarray<nb::numpy, bool>(owned, {flags.size()}, owner);
}

/// A NumPy copy of tokens (what the callbacks receive: theirs to keep).
inline nb::ndarray<nb::numpy, token_id> to_numpy(std::span<const token_id> tokens) {
  return to_numpy(std::vector<token_id>(tokens.begin(), tokens.end()), {tokens.size()});
}

template <class T, class... Shape>
std::span<const T> as_span(const host_array<T, Shape...>& a) {
  return {a.data(), a.size()};
}

/// (accepted int32 [n], bonus int32 [n], status codes int32 [n]): what an acceptance call returns.
inline nb::tuple results_to_numpy(const std::vector<acceptance_result>& results, const std::vector<status>& statuses) {
  const std::size_t n = results.size();
  std::vector<int> accepted(n), bonus(n), codes(n);
  for (std::size_t r = 0; r < n; ++r) {
    accepted[r] = results[r].accepted;
    bonus[r] = results[r].bonus;
    codes[r] = static_cast<int>(statuses[r]);
  }
  return nb::make_tuple(to_numpy(std::move(accepted), {n}), to_numpy(std::move(bonus), {n}), to_numpy(std::move(codes), {n}));
}

/// A read-only view of a [rows][cols] array.
inline matrix_view<const float> as_view(const rows_array& a) {
  return {a.data(), static_cast<std::int64_t>(a.shape(0)), static_cast<std::int64_t>(a.shape(1))};
}

/// "(2, 49152)": an array's shape, for messages.
template <class A>
std::string shape_text(const A& a) {
  std::string s = "(";
  for (std::size_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
  return s + (a.ndim() == 1 ? ",)" : ")");
}

}  // namespace blockpilot::python
