// What OpenTSDB 2.4.1's own classes print for the meta and tree objects pytsd writes: the
// oracle behind the expected strings of tests/unit/meta (storage JSON, API JSON field orders,
// TreeBuilder messages and branches), without a TSD or HBase. Run from the repository root
// after `scripts/opentsdb/opentsdb.sh fetch` (the jars land in .opentsdb/lib):
//
//   java -cp '.opentsdb/lib/*' scripts/opentsdb/MetaJsonProbe.java
//
// Private serialisers are called through reflection; TreeBuilder runs in test mode on a
// fresh ROOT, which touches no storage.
import net.opentsdb.meta.*;
import net.opentsdb.tree.*;
import net.opentsdb.utils.JSON;
import net.opentsdb.uid.UniqueId.UniqueIdType;
import java.lang.reflect.*;
import java.util.*;

public class MetaJsonProbe {
  static Object call(Object o, String m) throws Exception {
    Method mm = o.getClass().getDeclaredMethod(m); mm.setAccessible(true); return mm.invoke(o);
  }
  static void set(Object o, String f, Object v) throws Exception {
    Field ff = o.getClass().getDeclaredField(f); ff.setAccessible(true); ff.set(o, v);
  }
  public static void main(String[] a) throws Exception {
    objects();
    Builder.trees();
  }

  static void objects() throws Exception {
    TSMeta ts = new TSMeta("000001000001000001");
    set(ts, "created", 1350425579L);
    System.out.println("TSMETA_STORAGE " + new String((byte[]) call(ts, "getStorageJSON")));
    UIDMeta m = new UIDMeta(UniqueIdType.METRIC, "000001");
    set(m, "name", "sys.cpu.0");
    set(ts, "metric", m);
    set(ts, "tags", new ArrayList<UIDMeta>());
    HashMap<String,String> c = new HashMap<String,String>(); c.put("c","1"); c.put("d","2");
    ts.setCustom(c);
    System.out.println("TSMETA_API " + new String(JSON.serializeToBytes(ts)));
    System.out.println("UIDMETA_API " + new String(JSON.serializeToBytes(m)));
    set(m, "created", 1350425579L);
    System.out.println("UIDMETA_STORAGE " + new String((byte[]) call(m, "getStorageJSON")));
    Tree t = new Tree(1); set(t, "created", 1356998400L); t.setName("Test Tree");
    TreeRule r = new TreeRule(1); r.setType(TreeRule.TreeRuleType.TAGK); r.setField("host");
    r.setDescription("Hostname rule");
    System.out.println("RULE " + new String(JSON.serializeToBytes(r)));
    t.addRule(r);
    System.out.println("TREE_API " + new String(JSON.serializeToBytes(t)));
    System.out.println("TREE_STORAGE " + new String((byte[]) call(t, "toStorageJson")));
    Branch b = new Branch(1); b.setDisplayName("cpu");
    TreeMap<Integer,String> p = new TreeMap<Integer,String>(); p.put(0,"ROOT"); p.put(1,"sys");
    b.prependParentPath(p);
    Leaf l = new Leaf("user", "000001000001000001");
    b.addLeaf(l, null);
    System.out.println("BRANCH_API " + new String(JSON.serializeToBytes(b)));
    System.out.println("BRANCH_STORAGE " + new String((byte[]) call(b, "toStorageJson")));
    HashMap<String,Object> res = new HashMap<String,Object>();
    res.put("branch", null); res.put("meta", null); res.put("messages", new ArrayList<String>());
    System.out.println("TEST_KEYS " + new String(JSON.serializeToBytes(res)));
    HashMap<String,String> ren = new HashMap<String,String>(2); ren.put("result","false"); ren.put("error","x");
    System.out.println("RENAME " + new String(JSON.serializeToBytes(ren)));
  }
}

class Builder {
  static void set(Object o, String f, Object v) throws Exception {
    Field ff = o.getClass().getDeclaredField(f); ff.setAccessible(true); ff.set(o, v);
  }
  static UIDMeta uid(UniqueIdType t, String id, String name, Map<String,String> custom) throws Exception {
    UIDMeta m = new UIDMeta(t, id); set(m, "name", name);
    if (custom != null) set(m, "custom", new HashMap<String,String>(custom));
    return m;
  }
  static void run(Tree tree, TSMeta meta) throws Exception {
    TreeBuilder b = new TreeBuilder(null, tree);
    Branch root = new Branch(tree.getTreeId()); root.setDisplayName("ROOT");
    TreeMap<Integer,String> p = new TreeMap<Integer,String>(); p.put(0, "ROOT");
    root.prependParentPath(p);
    set(b, "root", root);
    b.processTimeseriesMeta(meta, true).joinUninterruptibly();
    for (String m : b.getTestMessage()) System.out.println("MSG " + m);
    System.out.println("BRANCH " + new String(JSON.serializeToBytes(b.getRootBranch())));
  }
  static TreeRule rule(int level, int order, TreeRule.TreeRuleType t) {
    TreeRule r = new TreeRule(1); r.setLevel(level); r.setOrder(order); r.setType(t); return r;
  }
  static void trees() throws Exception {
    TSMeta meta = new TSMeta("000001000001000001");
    Map<String,String> mc = new HashMap<String,String>(); mc.put("owner","ops");
    Map<String,String> kc = new HashMap<String,String>(); kc.put("role","hosts");
    Map<String,String> vc = new HashMap<String,String>(); vc.put("dc","lga");
    set(meta, "metric", uid(UniqueIdType.METRIC, "000001", "sys.cpu.user", mc));
    ArrayList<UIDMeta> tags = new ArrayList<UIDMeta>();
    tags.add(uid(UniqueIdType.TAGK, "000001", "host", kc));
    tags.add(uid(UniqueIdType.TAGV, "000001", "web01", vc));
    set(meta, "tags", tags);
    Tree t1 = new Tree(1);
    TreeRule r = rule(0, 0, TreeRule.TreeRuleType.METRIC); r.setSeparator("\\."); t1.addRule(r);
    run(t1, meta);
    Tree t2 = new Tree(1);
    r = rule(0,0,TreeRule.TreeRuleType.TAGV_CUSTOM); r.setField("web01"); r.setCustomField("dc"); r.setDisplayFormat("dc-{value}"); t2.addRule(r);
    r = rule(1,0,TreeRule.TreeRuleType.TAGK_CUSTOM); r.setField("host"); r.setCustomField("missing"); t2.addRule(r);
    r = rule(1,1,TreeRule.TreeRuleType.TAGK_CUSTOM); r.setField("host"); r.setCustomField("role"); r.setDisplayFormat("{tag_name}:{value}"); t2.addRule(r);
    r = rule(2,0,TreeRule.TreeRuleType.METRIC_CUSTOM); r.setField("sys.cpu.user"); r.setCustomField("owner"); t2.addRule(r);
    r = rule(3,0,TreeRule.TreeRuleType.TAGK); r.setField("host"); r.setRegex("^([a-z]+)(\\d+)"); r.setRegexGroupIdx(1); t2.addRule(r);
    r = rule(4,0,TreeRule.TreeRuleType.METRIC); r.setRegex("\\.([a-z]+)$"); r.setDisplayFormat("{ovalue}/{value}"); t2.addRule(r);
    run(t2, meta);
    // A level that matches nothing in the middle, and a strict tree.
    Tree t3 = new Tree(1);
    r = rule(0,0,TreeRule.TreeRuleType.TAGK); r.setField("dc"); t3.addRule(r);
    r = rule(1,0,TreeRule.TreeRuleType.TAGK); r.setField("host"); t3.addRule(r);
    r = rule(2,0,TreeRule.TreeRuleType.METRIC); t3.addRule(r);
    run(t3, meta);
  }
}
