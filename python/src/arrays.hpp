// The array types of the binding: what it reads without a copy (any DLPack or buffer-protocol array on
// the CPU: NumPy, PyTorch, ...) and the NumPy arrays it returns.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/vector.h>

#include "blockpilot/acceptance/acceptance_rule.hpp"
#include "blockpilot/types.hpp"

namespace blockpilot::python {

namespace nb = nanobind;

/// A C-contiguous host array read in place; other dtypes or layouts are converted (one copy) on the way in.
template <class T, class... Shape>
using host_array = nb::ndarray<const T, nb::c_contig, nb::device::cpu, Shape...>;
using rows_array = host_array<float, nb::ndim<2>>;          ///< [rows][vocab] float32

/// "(2, 49152)": an array's shape, for messages.
template <class A>
std::string shape_text(const A& a) {
  std::string s = "(";
  for (std::size_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
  return s + (a.ndim() == 1 ? ",)" : ")");
}

/// Int32 values (token ids, offsets) from any 1-D integer array on the CPU (int32 C-contiguous ones read in
/// place, other integer types copied) or a sequence of ints. Anything else raises, never truncates: floats,
/// bools and values outside int32 (TypeError / ValueError naming `what`).
class int32_values {
 public:
  int32_values(nb::handle source, const std::string& what) {
    if (nb::try_cast(source, in_place_, false)) return;
    if (nb::ndarray<nb::ro, nb::device::cpu> any; nb::try_cast(source, any, false)) {
      if (any.ndim() != 1) throw nb::value_error((what + ": needs a 1-D array, not shape " + shape_text(any)).c_str());
      const nb::dlpack::dtype type = any.dtype();
      const bool integer = type.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Int) ||
                           type.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::UInt);
      if (any.size() > 0 && !(integer && type.lanes == 1 && (type.bits == 8 || type.bits == 16 || type.bits == 32 || type.bits == 64)))
        throw nb::type_error((what + ": needs integers").c_str());
      const bool is_signed = type.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Int);
      const auto* base = static_cast<const std::byte*>(any.data());
      for (std::size_t i = 0; i < any.size(); ++i)
        copied_.push_back(checked(element(base + static_cast<std::ptrdiff_t>(i) * any.stride(0) * (type.bits / 8), type.bits, is_signed), what));
      return;
    }
    if (std::vector<std::int64_t> listed; nb::try_cast(source, listed)) {  // ints only: a float is not converted
      for (const nb::handle item : source)
        if (nb::isinstance<nb::bool_>(item)) throw nb::type_error((what + ": needs integers, not bools").c_str());
      for (const std::int64_t t : listed) copied_.push_back(checked(t, what));
      return;
    }
    throw nb::type_error((what + ": needs a 1-D integer array or a sequence of ints, not " +
                          std::string(nb::type_name(source.type()).c_str())).c_str());
  }

  [[nodiscard]] std::span<const std::int32_t> span() const {
    return in_place_.is_valid() ? std::span<const std::int32_t>(in_place_.data(), in_place_.size()) : std::span<const std::int32_t>(copied_);
  }

 private:
  /// One element of `bits` bits, as a signed 64-bit number.
  static std::int64_t element(const std::byte* p, int bits, bool is_signed) {
    const auto read = [p]<class T>(T) { T v; std::memcpy(&v, p, sizeof v); return v; };
    switch (bits) {
      case 8: return is_signed ? read(std::int8_t{}) : read(std::uint8_t{});
      case 16: return is_signed ? read(std::int16_t{}) : read(std::uint16_t{});
      case 32: return is_signed ? read(std::int32_t{}) : read(std::uint32_t{});
      default:  // uint64 past int64's range is outside int32 all the same
        return is_signed ? read(std::int64_t{})
                         : static_cast<std::int64_t>(std::min<std::uint64_t>(read(std::uint64_t{}), std::numeric_limits<std::int64_t>::max()));
    }
  }
  static token_id checked(std::int64_t t, const std::string& what) {
    if (t < std::numeric_limits<token_id>::min() || t > std::numeric_limits<token_id>::max())
      throw nb::value_error((what + ": " + std::to_string(t) + " is outside int32").c_str());
    return static_cast<token_id>(t);
  }

  host_array<token_id, nb::ndim<1>> in_place_;
  std::vector<token_id> copied_;
};

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

}  // namespace blockpilot::python
