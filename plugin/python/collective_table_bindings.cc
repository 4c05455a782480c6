// _myplugin.collective_table(): the collective table (collectives/collective_table.h)
// as data, from which ci/gen_collective_table.py writes
// jax_plugin/spmd/collective_table.py for the rewrite.
#include <nanobind/nanobind.h>

#include "collectives/collective_table.h"
#include "collectives/dtype.h"
#include "python/bindings.h"

namespace nb = nanobind;

namespace myplugin::python {

void BindCollectiveTable(nb::module_& m) {
  m.def("collective_table", [] {
    namespace coll = myplugin::collectives;
    nb::dict attributes;  // by id, in the order the targets first name them
    nb::list targets;
    for (const coll::CollectiveTarget* t : coll::kCollectiveTargets) {
      nb::list names;
      for (size_t i = 0; i < t->attribute_count(); ++i) {
        const coll::AttributeSpec& a = *t->attributes[i];
        names.append(a.id);
        nb::dict attribute;
        attribute["key"] = a.key;
        attribute["type"] = coll::Name(a.type);
        attributes[a.id] = attribute;
      }
      nb::list engines;
      for (coll::Engine e : {coll::kHostEngine, coll::kCudaEngine}) {
        if (t->engines & e) engines.append(coll::Name(e));
      }
      nb::dict target;
      target["id"] = t->id;
      target["name"] = t->name;
      target["replaces"] = t->replaces;
      target["operands"] = coll::Name(t->operands);
      target["results"] = coll::Name(t->results);
      target["attributes"] = names;
      target["engines"] = engines;
      targets.append(target);
    }
    nb::list reductions;
    for (coll::Reduction r : {coll::Reduction::kSum, coll::Reduction::kProduct, coll::Reduction::kMin,
                              coll::Reduction::kMax, coll::Reduction::kAnd, coll::Reduction::kOr}) {
      reductions.append(coll::Name(r));
    }
    nb::dict out;
    out["attributes"] = attributes;
    out["targets"] = targets;
    out["reductions"] = reductions;
    return out;
  }, "The collectives' custom-call targets (name, operands, results, attribute ids, engines), their attributes "
     "(by id: key and type) and the names of the reductions, as C++ defines them.");
}

}  // namespace myplugin::python
