// serve_semcache_ann.cc - hnswlib's HNSW index behind a C face (serve_semcache_ann.h).  The
// only C++ of strata: hnswlib is header-only C++; nothing else of it crosses the seam (every
// exception is caught here and becomes an errno).
#include "serve_semcache_ann.h"

#include <cerrno>
#include <hnswlib/hnswlib.h>
#include <new>

struct serve_semcache_ann_t {
    hnswlib::InnerProductSpace space;
    hnswlib::HierarchicalNSW<float> graph;
    int dim, max_labels, live;
    serve_semcache_ann_t(int d, int n, int m, int efc)
        : space((size_t)d), graph(&space, (size_t)(n < 1024 ? n : 1024), (size_t)m, (size_t)efc),
          dim(d), max_labels(n), live(0) {} // room for 1024 at first, doubled as it fills
};

extern "C" serve_semcache_ann_t *serve_semcache_ann_new(int dim, int max_labels, int m,
                                                        int ef_construction) {
    if (dim < 1 || max_labels < 1 || m < 2 || ef_construction < 1)
        return nullptr;
    try {
        return new serve_semcache_ann_t(dim, max_labels, m, ef_construction);
    } catch (...) {
        return nullptr;
    }
}

extern "C" void serve_semcache_ann_destroy(serve_semcache_ann_t **self_p) {
    delete *self_p;
    *self_p = nullptr;
}

extern "C" int serve_semcache_ann_add(serve_semcache_ann_t *a, int label, const float *v) {
    if (label < 0 || label >= a->max_labels || !v)
        return -EINVAL;
    try {
        bool present = a->graph.label_lookup_.count((hnswlib::labeltype)label) != 0;
        bool hidden =
            present && a->graph.isMarkedDeleted(a->graph.label_lookup_[(hnswlib::labeltype)label]);
        size_t cap = a->graph.max_elements_;
        if (!present && a->graph.cur_element_count >= cap) // full: twice the room
            a->graph.resizeIndex(cap * 2 < (size_t)a->max_labels ? cap * 2 : (size_t)a->max_labels);
        a->graph.addPoint(v, (hnswlib::labeltype)label); // replaces (and unhides) a present one
        a->live += !present || hidden;
        return 0;
    } catch (const std::bad_alloc &) {
        return -ENOMEM;
    } catch (...) {
        return -EINVAL;
    }
}

extern "C" void serve_semcache_ann_remove(serve_semcache_ann_t *a, int label) {
    auto it = a->graph.label_lookup_.find((hnswlib::labeltype)label);
    if (it == a->graph.label_lookup_.end() || a->graph.isMarkedDeleted(it->second))
        return;
    try {
        a->graph.markDelete((hnswlib::labeltype)label);
        a->live--;
    } catch (...) {
    }
}

extern "C" int serve_semcache_ann_count(const serve_semcache_ann_t *a) {
    return a->live;
}

extern "C" int serve_semcache_ann_search(const serve_semcache_ann_t *a, const float *q, int k,
                                         int ef, int *labels, float *sims) {
    if (k < 1 || !a->live)
        return 0;
    try {
        const_cast<serve_semcache_ann_t *>(a)->graph.setEf((size_t)(ef > k ? ef : k));
        auto top = a->graph.searchKnn(q, (size_t)k); // a max-heap of distances: 1 - ip
        int n = (int)top.size();
        for (int i = n - 1; i >= 0; i--, top.pop()) { // the farthest comes out first
            labels[i] = (int)top.top().second;
            sims[i] = 1.0f - top.top().first;
        }
        return n;
    } catch (...) {
        return 0;
    }
}
