// Test access to a cache's store: the HeadStore of head (b, h) and its codecs.
#pragma once

#include <gtest/gtest.h>

#include "eviction/eviction_cache.hpp"
#include "store/head_store.hpp"
#include "veloxquant/cache.hpp"

namespace storetest {

inline const vq::store::HeadStore& head_store(const vq::KVCache& c, int64_t b = 0, int64_t h = 0) {
  const auto* ec = dynamic_cast<const vq::eviction::EvictionCache*>(&c);
  if (ec == nullptr)
    throw std::runtime_error("not a store-backed cache: " + c.config().to_string());
  return ec->head_state(b, h).kv;
}

/// The codec of stream kv (0 = keys, 1 = values) of head (b, h), as type T (throws if not).
template <typename T>
const T& codec(const vq::KVCache& c, int64_t b, int64_t h, int kv) {
  const auto* p = dynamic_cast<const T*>(&head_store(c, b, h).codec(kv));
  if (p == nullptr) throw std::runtime_error("unexpected codec type in " + c.config().to_string());
  return *p;
}

}  // namespace storetest
