#include "structured/grammar_check.h"

#include <algorithm>
#include <deque>
#include <utility>
#include <vector>

#include "structured/byte_matcher.h"

namespace kestrel::structured {
namespace {

// Heights saturate here: a node this tall can never be entered, which is all the matcher needs
// to know. kNever marks nodes that cannot finish at all.
constexpr int32_t kTooTall = kMaxDepth + 1;
constexpr int32_t kNever = kMaxDepth + 2;
// Rules and groups the matcher may open before consuming a byte; it expands them recursively.
constexpr int32_t kMaxFirstChain = 1000;

int32_t plus_one(int32_t h) {
  return h == kNever ? kNever : std::min(h + 1, kTooTall);
}

class Checker {
 public:
  Checker(Grammar& g, const std::map<int32_t, std::string>& names) : g_(g), names_(names) {}

  Status run() {
    mark_reachable();
    compute_nullable();
    KTRY(check_left_recursion());
    rewrite_repeats();
    compute_heights();
    KTRY(check_productive());
    const int32_t need = plus_one(g_.nodes[g_.root].height);  // the root frame, then the root
    if (need > kMaxDepth) {
      return make_error(
          "the grammar nests too deeply: its shortest text needs more than {} stack frames",
          kMaxDepth);
    }
    compute_tails();
    return Status::Ok();
  }

 private:
  std::vector<int32_t> children(int32_t id) const {
    const Node& n = g_.nodes[id];
    switch (n.kind) {
      case NodeKind::kUnion:
        return n.alts;
      case NodeKind::kSequence:
        return n.items;
      case NodeKind::kRepeat:
        return {n.item};
      default:
        return {};
    }
  }

  // What the matcher may enter before consuming a byte: alternatives, a sequence's items up
  // to its first non-nullable one, a repetition's item.
  std::vector<int32_t> first_children(int32_t id) const {
    const Node& n = g_.nodes[id];
    if (n.kind != NodeKind::kSequence) return children(id);
    std::vector<int32_t> out;
    for (const int32_t item : n.items) {
      out.push_back(item);
      if (!g_.nodes[item].nullable) break;
    }
    return out;
  }

  std::string rule_name(int32_t id) const {
    auto it = names_.find(id);
    return it == names_.end() ? std::string() : it->second;
  }

  void mark_reachable() {
    reachable_.assign(g_.nodes.size(), false);
    std::vector<int32_t> todo = {g_.root};
    reachable_[g_.root] = true;
    while (!todo.empty()) {
      const int32_t id = todo.back();
      todo.pop_back();
      for (const int32_t c : children(id)) {
        if (!reachable_[c]) {
          reachable_[c] = true;
          todo.push_back(c);
        }
      }
    }
  }

  // Each node's parents, for the fixpoints below: a node is looked at again only when one of
  // its children changed.
  std::vector<std::vector<int32_t>> parents() const {
    std::vector<std::vector<int32_t>> out(g_.nodes.size());
    for (size_t id = 0; id < g_.nodes.size(); ++id) {
      for (const int32_t c : children(static_cast<int32_t>(id))) {
        out[c].push_back(static_cast<int32_t>(id));
      }
    }
    return out;
  }

  bool nullable_now(const Node& n) const {
    auto is_nullable = [&](int32_t a) { return g_.nodes[a].nullable; };
    switch (n.kind) {
      case NodeKind::kUnion:
        return std::any_of(n.alts.begin(), n.alts.end(), is_nullable);
      case NodeKind::kSequence:
        return std::all_of(n.items.begin(), n.items.end(), is_nullable);
      case NodeKind::kRepeat:
        return n.min_items == 0 || g_.nodes[n.item].nullable;
      default:
        return false;
    }
  }

  // Runs update(id) on every node, then again on the parents of each node it reports changed,
  // until nothing changes (a node waits in the queue at most once at a time).
  template <typename Update>
  void fixpoint(Update update) const {
    const std::vector<std::vector<int32_t>> up = parents();
    std::deque<int32_t> todo;
    std::vector<bool> queued(g_.nodes.size(), true);
    for (size_t id = 0; id < g_.nodes.size(); ++id) todo.push_back(static_cast<int32_t>(id));
    while (!todo.empty()) {
      const int32_t id = todo.front();
      todo.pop_front();
      queued[id] = false;
      if (!update(id)) continue;
      for (const int32_t p : up[id]) {
        if (!queued[p]) {
          queued[p] = true;
          todo.push_back(p);
        }
      }
    }
  }

  void compute_nullable() {
    fixpoint([&](int32_t id) {
      Node& n = g_.nodes[id];
      if (n.nullable || !nullable_now(n)) return false;
      n.nullable = true;
      return true;
    });
  }

  // A cycle through first_children would make the matcher expand forever; a long chain would
  // make its (recursive) expansion overflow the call stack.
  Status check_left_recursion() const {
    struct Step {
      int32_t node;
      std::vector<int32_t> next;  // its first_children
      size_t done = 0;
    };
    std::vector<int8_t> color(g_.nodes.size(), 0);   // 0 new, 1 on the path, 2 done
    std::vector<int32_t> chain(g_.nodes.size(), 0);  // longest first_children path below
    std::vector<Step> path;
    for (size_t start = 0; start < g_.nodes.size(); ++start) {
      if (!reachable_[start] || color[start] != 0) continue;
      path.push_back({static_cast<int32_t>(start), first_children(static_cast<int32_t>(start))});
      color[start] = 1;
      while (!path.empty()) {
        Step& step = path.back();
        const int32_t u = step.node;
        if (step.done == step.next.size()) {
          for (const int32_t v : step.next) chain[u] = std::max(chain[u], chain[v] + 1);
          if (chain[u] > kMaxFirstChain) {
            return make_error(
                "the grammar nests too deeply: more than {} rules or groups open before the "
                "first character",
                kMaxFirstChain);
          }
          color[u] = 2;
          path.pop_back();
          continue;
        }
        const int32_t v = step.next[step.done++];
        if (color[v] == 2) continue;
        if (color[v] == 1) return left_recursion_error(path, v);
        color[v] = 1;
        path.push_back({v, first_children(v)});
      }
    }
    return Status::Ok();
  }

  template <typename Path>
  Error left_recursion_error(const Path& path, int32_t v) const {
    auto it = std::find_if(path.begin(), path.end(), [&](const auto& p) { return p.node == v; });
    for (; it != path.end(); ++it) {
      const std::string name = rule_name(it->node);
      if (!name.empty()) {
        return make_error(
            "rule '{}' is left-recursive: it can reach itself without consuming any text "
            "(write the repetition with * or + instead)",
            name);
      }
    }
    return make_error("the grammar is left-recursive");
  }

  // The non-empty strings of node x as a node (-1: x matches only the empty string).
  int32_t nonempty(int32_t x) {
    if (!g_.nodes[x].nullable) return x;
    if (auto it = nonempty_.find(x); it != nonempty_.end()) return it->second;
    const Node n = g_.nodes[x];
    int32_t out = -1;
    switch (n.kind) {
      case NodeKind::kSequence: {
        // All items are nullable: a non-empty match starts non-empty in one of them.
        std::vector<int32_t> alts;
        for (size_t i = 0; i < n.items.size(); ++i) {
          const int32_t head = nonempty(n.items[i]);
          if (head < 0) continue;
          Node seq;
          seq.kind = NodeKind::kSequence;
          seq.items = {head};
          seq.items.insert(seq.items.end(), n.items.begin() + static_cast<long>(i) + 1,
                           n.items.end());
          alts.push_back(seq.items.size() == 1 ? head : add(std::move(seq)));
        }
        out = union_of(std::move(alts));
        break;
      }
      case NodeKind::kRepeat: {
        const int32_t item = nonempty(n.item);
        if (item >= 0) {
          Node rep = n;
          rep.item = item;
          rep.min_items = 1;
          rep.nullable = false;
          out = rep.max_items == 1 ? item : add(std::move(rep));
        }
        break;
      }
      case NodeKind::kUnion:
        if (names_.count(x) != 0) {
          // A rule keeps its own slot; it cannot recur here (that is left recursion).
          out = add(Node{});
          nonempty_[x] = out;
          const int32_t body = nonempty(n.alts[0]);
          if (body < 0) {
            out = -1;
          } else {
            g_.nodes[out].alts = {body};
          }
        } else {
          std::vector<int32_t> alts;
          for (const int32_t a : n.alts) {
            const int32_t h = nonempty(a);
            if (h >= 0) alts.push_back(h);
          }
          out = union_of(std::move(alts));
        }
        break;
      default:
        break;
    }
    nonempty_[x] = out;
    return out;
  }

  int32_t add(Node node) {
    g_.nodes.push_back(std::move(node));
    return static_cast<int32_t>(g_.nodes.size() - 1);
  }

  int32_t union_of(std::vector<int32_t> alts) {
    if (alts.empty()) return -1;
    if (alts.size() == 1) return alts[0];
    Node node;
    node.alts = std::move(alts);
    return add(std::move(node));
  }

  // repeat(X) with X nullable becomes repeat(nonempty(X)) from zero times: the same strings,
  // and every round consumes a byte.
  void rewrite_repeats() {
    const size_t n = g_.nodes.size();
    for (size_t id = 0; id < n; ++id) {
      if (!reachable_[id] || g_.nodes[id].kind != NodeKind::kRepeat) continue;
      const int32_t item = g_.nodes[id].item;
      if (!g_.nodes[item].nullable) continue;
      const int32_t ne = nonempty(item);
      Node& r = g_.nodes[id];
      if (ne < 0) {
        r.kind = NodeKind::kSequence;
        r.items.clear();
      } else {
        r.item = ne;
        r.min_items = 0;
      }
    }
  }

  // Fewest frames to finish each node, as the matcher lays them out (byte_matcher.h): literal
  // and class frames take one; a sequence frame stays while items before the last run (the
  // last replaces it); a repetition frame stays until its last possible round.
  int32_t height_of(const Node& n, const std::vector<int32_t>& h) const {
    if (n.nullable) return 0;
    switch (n.kind) {
      case NodeKind::kUnion: {
        int32_t best = kNever;
        for (const int32_t a : n.alts) best = std::min(best, h[a]);
        return best;
      }
      case NodeKind::kSequence: {
        int32_t worst = h[n.items.back()];
        for (size_t j = 0; j + 1 < n.items.size(); ++j)
          worst = std::max(worst, term(h[n.items[j]]));
        return worst;
      }
      case NodeKind::kRepeat:
        return n.max_items == 1 ? h[n.item] : plus_one(h[n.item]);
      default:
        return 1;
    }
  }

  // An item before a sequence's last one: nothing when skipped, else above the sequence frame.
  static int32_t term(int32_t h) { return h == 0 ? 0 : plus_one(h); }

  // Heights only fall, and saturate at kTooTall, so each node changes a bounded number of times.
  void compute_heights() {
    std::vector<int32_t> h(g_.nodes.size(), kNever);
    fixpoint([&](int32_t id) {
      const int32_t v = height_of(g_.nodes[id], h);
      if (v >= h[id]) return false;
      h[id] = v;
      return true;
    });
    for (size_t id = 0; id < g_.nodes.size(); ++id) g_.nodes[id].height = h[id];
  }

  Status check_productive() const {
    std::string never;
    int count = 0;
    for (const auto& [id, name] : names_) {
      if (!reachable_[id] || g_.nodes[id].height != kNever) continue;
      never += fmt::format("{}'{}'", count++ == 0 ? "" : ", ", name);
    }
    if (count != 0) {
      return make_error("{} {} can never finish (every way through {} recurses without end)",
                        count == 1 ? "rule" : "rules", never, count == 1 ? "it" : "them");
    }
    if (g_.nodes[g_.root].height == kNever) return make_error("the grammar matches no text");
    return Status::Ok();
  }

  void compute_tails() {
    for (Node& n : g_.nodes) {
      n.height = std::min(n.height, kTooTall);
      if (n.kind != NodeKind::kSequence || n.items.empty()) continue;
      const size_t size = n.items.size();
      n.tail.assign(size + 1, 0);
      n.tail[size - 1] = std::min(g_.nodes[n.items.back()].height, kTooTall);
      for (size_t j = size - 1; j-- > 0;) {
        n.tail[j] = std::max(n.tail[j + 1], std::min(term(g_.nodes[n.items[j]].height), kTooTall));
      }
    }
  }

  Grammar& g_;
  const std::map<int32_t, std::string>& names_;
  std::vector<bool> reachable_;
  std::map<int32_t, int32_t> nonempty_;
};

}  // namespace

Status check_generic_grammar(Grammar& g, const std::map<int32_t, std::string>& rule_names) {
  return Checker(g, rule_names).run();
}

}  // namespace kestrel::structured
