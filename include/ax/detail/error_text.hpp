// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include "../errors.hpp"
#include "record.hpp"

#include <cstdlib>
#include <exception>
#include <string>
#include <typeinfo>
#include <utility>

#if __has_include(<cxxabi.h>)
#include <cxxabi.h>
#endif

/// How a task's exception becomes text: its type (demangled) and message, for query(), hooks
/// and the dead-letter list.
namespace ax::detail {

/// Readable name of a type from typeid or the ABI (demangled where the C++ runtime can).
inline std::string type_name(const char* mangled) {
    if (mangled == nullptr)
        return "unknown";
#if __has_include(<cxxabi.h>)
    int status = 0;
    char* demangled = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
    if (status == 0 && demangled != nullptr) {
        std::string out(demangled);
        std::free(demangled);
        return out;
    }
#endif
    return mangled;
}

/// Type and text of an exception, for query(), hooks and the dead-letter list.
struct ErrorText {
    std::string type;
    std::string message;
    bool permanent = false;
};

inline ErrorText describe_exception(const std::exception_ptr& e) {
    try {
        std::rethrow_exception(e);
    } catch (const PermanentError& ex) {
        return {type_name(typeid(ex).name()), ex.what(), true};
    } catch (const std::exception& ex) {
        return {type_name(typeid(ex).name()), ex.what(), false};
    } catch (...) {
#if __has_include(<cxxabi.h>)
        const std::type_info* t = abi::__cxa_current_exception_type();
        std::string type = type_name(t != nullptr ? t->name() : nullptr);
#else
        std::string type = "unknown";
#endif
        return {type, "non-standard exception of type " + type, false};
    }
}

/// The callable's destructor threw after a successful run: the task still succeeded; the
/// exception is kept as its last error so query() says what happened.
inline void note_destructor_error(TaskRecord& r, const std::exception_ptr& e) {
    ErrorText text = describe_exception(e);
    r.lock_extras();
    try {
        TaskExtras& x = r.ensure_extras();
        x.last_error = "exception from the task's destructor, contained: " + text.message;
        x.last_error_type = std::move(text.type);
    } catch (...) {
    }
    r.unlock_extras();
}

} // namespace ax::detail
