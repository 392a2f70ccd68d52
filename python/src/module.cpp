// The extension module blockpilot._blockpilot: status codes, the error type, and the parts.
#include <Python.h>

#include <string>

#include <nanobind/stl/string.h>

#include "arrays.hpp"
#include "bindings.hpp"
#include "errors.hpp"

namespace blockpilot::python {
namespace {

PyObject* error_type = nullptr;

/// Raises blockpilot.Error(message) with `.status` set, from `cause` when there is one.
void raise_error(const char* message, nb::object code, nb::handle cause = {}) {
  nb::object exc = nb::borrow(error_type)(message);
  exc.attr("status") = std::move(code);
  if (cause.is_valid()) PyException_SetCause(exc.ptr(), cause.inc_ref().ptr());
  PyErr_SetObject(error_type, exc.ptr());
}

void bind_status(nb::module_& m) {
  nb::enum_<status> e(m, "Status", nb::is_arithmetic(), "The library's status codes; `message` is the sentence that describes one.");
  e.value("success", status::success)
      .value("invalid_block_size", status::invalid_block_size)
      .value("empty_prompt", status::empty_prompt)
      .value("vocab_mismatch", status::vocab_mismatch)
      .value("non_finite_logits", status::non_finite_logits)
      .value("invalid_temperature", status::invalid_temperature)
      .value("invalid_token", status::invalid_token)
      .value("invalid_argument", status::invalid_argument)
      .value("workspace_too_small", status::workspace_too_small)
      .value("model_error", status::model_error)
      .value("cuda_error", status::cuda_error)
      .value("no_device", status::no_device)
      .value("out_of_memory", status::out_of_memory)
      .value("cancelled", status::cancelled)
      .def_prop_ro("message", [](status s) { return std::string(to_string(s)); });
}

}  // namespace
}  // namespace blockpilot::python

NB_MODULE(_blockpilot, m) {
  namespace bp = blockpilot::python;
  namespace nb = nanobind;
  m.doc() = "BlockPilot's C++ library: block-size decisions, acceptance rules and the speculative decode loop.";
  bp::error_type = PyErr_NewException("blockpilot.Error", PyExc_RuntimeError, nullptr);
  m.attr("Error") = nb::handle(bp::error_type);
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const bp::callback_failure& e) {
      if (PyObject_IsInstance(e.raised.ptr(), PyExc_Exception) == 1) bp::raise_error(e.what(), nb::none(), e.raised);
      else PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(e.raised.ptr())), e.raised.ptr());
    } catch (const bp::status_error& e) {
      bp::raise_error(e.what(), nb::cast(e.code));
    } catch (const blockpilot::error& e) {
      bp::raise_error(e.what(), nb::none());
    }
  });
  bp::bind_status(m);
  bp::bind_decision(m);
  bp::bind_acceptance(m);
  bp::bind_decoder(m);
  bp::bind_speed_cutoff(m);
  bp::bind_cuda(m);
}
